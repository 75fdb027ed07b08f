"""A simulated host (gpu02, or a base-tier host gpu03/gpu04/gpu23) as a discrete-event simulation:
sim_host.py (`SimHost`, the public face), core.py (the parts assembled with the containers'
lifecycle), state.py (time, the event queue, the serving timeline), engines.py (sglang's cold start
and the engine faults), services.py (the one-shots, the registrar), docker.py and docker_format.py
(what docker shows), serving.py (model-proxy, inference and the soak relay), and what an engine is
made of: containers.py, engine_cache.py, hicache_budget.py, sglang_log.py, device_memory.py,
live_traffic.py."""
