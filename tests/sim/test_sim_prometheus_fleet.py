"""The simulator's Prometheus-compatible query API (orchestrator_sim/apps/prometheus.py) as a central
one: every simulated host's engines, labelled by the collector's `host` and `container_name`."""

from __future__ import annotations

from orchestrator_sim import SimConfig, SimFleet

R2 = 'host="gpu02", container_name="model-sg-glm53-w4afp8-tp4-r2"'
GPU23 = 'host="gpu23", container_name=~"model-sg-glm53-fp8-tp4-r[12]"'


def test_the_simulators_query_api_holds_every_simulated_hosts_engines_by_host_and_container():
    from orchestrator_sim.apps.prometheus import evaluate, host_series


    with SimFleet(SimConfig(speed=1000.0, hosts=("gpu02", "gpu23"), initial="long-context")) as fleet:
        series = [s for h in fleet.hosts.values() for s in host_series(h)]
        gpu23 = evaluate('sum({__name__="sglang:num_requests_total", ' + GPU23 + "})", series)
        assert len(gpu23) == 1 and gpu23[0][1] > 0
        r2 = evaluate('{__name__="sglang:num_requests_total", ' + R2 + "}", series)
        assert [labels["host"] for labels, _ in r2] == ["gpu02"]
        # the default `replica="r2"` alone matches both hosts' r2: a fleet-wide API needs a host matcher
        both = evaluate('{__name__="sglang:num_requests_total", replica="r2"}', series)
        assert sorted(labels["host"] for labels, _ in both) == ["gpu02", "gpu23"]
