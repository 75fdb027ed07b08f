"""The serving paths out of the simulated host: the registrar's view (model-proxy), the inference
endpoint through proxy-glm53, and the soak relay's per-replica ports."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from orchestrator_sim.compose_manager.repo import PROXY_SERVICE, REGISTRAR_SERVICE, RELAY_SERVICE
from orchestrator_sim.host import device_memory, live_traffic, sglang_log
from orchestrator_sim.host.containers import SERVED_MODEL, Container
from orchestrator_sim.host.core import HostCore
from orchestrator_sim.host.engine_cache import (
    CacheLookup,
    chat_completion_body,
    completion_text,
    render_prompt,
    tokenize,
)

_RELAY_PATH = re.compile(r"^/(health|metrics|v1/models|v1/chat/completions|v1/completions|v1/responses)$")


def nginx_error_page(status: int, reason: str) -> str:
    return (
        f"<html>\r\n<head><title>{status} {reason}</title></head>\r\n<body>\r\n"
        f"<center><h1>{status} {reason}</h1></center>\r\n<hr><center>nginx/1.27.3</center>\r\n"
        "</body>\r\n</html>\r\n"
    )


class ServingPaths(HostCore):
    """What the outside world reaches on the host (mixed into SimHost)."""

    def serving_path_ok(self) -> bool:
        with self._lock:
            return self._serving_path_ok()

    def registration(self) -> tuple[bool, bool]:
        """(listed under the host's domain, healthy) as the registrar has left it. gpu02: listed a
        discovery cycle after its registrar started. A base host: from the registrar's register
        to its unregister (SIGTERM, retry limit); unhealthy under the `host-unhealthy` fault."""
        with self._lock:
            self.sync()
            if self.base:
                return self._registered, self._domain_serving_now()
            reg = self._containers.get(REGISTRAR_SERVICE)
            listed = bool(
                reg and reg.up and reg.started_at is not None and self._now - reg.started_at >= self.discovery_cycle_s
            )
            return listed, listed and self.serving_path_ok()

    def relay_listening(self) -> bool:
        with self._lock:
            relay = self._containers.get(RELAY_SERVICE)
            return bool(relay and relay.up)

    def _engine_chat(self, c: Container, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        assert c.engine is not None
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return 400, {
                "object": "error",
                "message": "messages must be a non-empty list",
                "type": "BadRequestError",
                "code": 400,
            }
        try:
            max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 64)
            temperature = float(body["temperature"]) if body.get("temperature") is not None else 1.0
        except (TypeError, ValueError):
            return 400, {"object": "error", "message": "invalid max_tokens or temperature", "code": 400}
        prompt = render_prompt(messages)
        tokens = tokenize(prompt)
        lookup = c.engine.cache.match(tokens)
        if self.faults.active("cache-miss"):
            lookup = CacheLookup(0, 0)
        elif c.engine.fault == "host-restore-missing":  # the host tier never restores: recomputed
            lookup = CacheLookup(lookup.cached_tokens - lookup.host_hit_tokens, 0)
        c.engine.cache.insert(tokens)
        words = completion_text(prompt, max_tokens, temperature, self.rng)
        k = c.engine.counters
        k.requests += 1
        k.prompt_tokens += len(tokens)
        k.generation_tokens += len(words)
        k.cached_tokens += lookup.cached_tokens
        k.host_hit_tokens += lookup.host_hit_tokens
        self._append(
            c, [sglang_log.prefill_line(self.wall(), len(tokens) - lookup.cached_tokens, lookup.cached_tokens)]
        )
        rid = "chatcmpl-" + hashlib.sha256(f"{c.id}:{k.requests}".encode()).hexdigest()[:24]
        return 200, chat_completion_body(
            model=str(body.get("model") or SERVED_MODEL),
            prompt_tokens=len(tokens),
            cached_tokens=lookup.cached_tokens,
            words=words,
            max_tokens=max_tokens,
            created=int(self.wall().timestamp()),
            request_id=rid,
        )

    def inference_chat(self, body: Any) -> tuple[int, dict[str, Any], str | None]:
        """A completion through model-proxy and the host's proxy; returns (status, json, serving engine)."""
        with self._lock:
            self.sync()
            listed, healthy = self.registration()
            if not (listed and healthy):
                return (
                    503,
                    {
                        "error": {
                            "message": f"no healthy backend for {self.domain}",
                            "type": "service_unavailable",
                            "code": 503,
                        }
                    },
                    None,
                )
            if self.faults.active("completion-fails"):
                return (
                    500,
                    {
                        "error": {
                            "message": "upstream error: engine returned 500 Internal Server Error",
                            "type": "internal_error",
                            "code": 500,
                        }
                    },
                    None,
                )
            if not isinstance(body, dict):
                return (
                    400,
                    {"error": {"message": "invalid JSON body", "type": "invalid_request_error", "code": 400}},
                    None,
                )
            model = str(body.get("model") or "")
            if "glm-5.3-flash" not in model:
                return (
                    404,
                    {
                        "error": {
                            "message": f"The model `{model}` does not exist.",
                            "type": "invalid_request_error",
                            "code": 404,
                        }
                    },
                    None,
                )
            proxy = self._containers[PROXY_SERVICE]
            pool = [e for name in proxy.proxy_pool if (e := self._containers.get(name)) is not None and e.ready]
            messages = body.get("messages") if isinstance(body.get("messages"), list) else []
            best = self._pick_engine(pool, messages)
            status, out = self._engine_chat(best, body)
            return status, out, best.name

    def _pick_engine(self, pool: list[Container], messages: list[Any]) -> Container:
        """proxy-glm53's choice: conversation affinity (the engine that already holds this
        conversation's first turn), otherwise the next engine in turn."""
        if messages:
            tokens = tokenize(render_prompt(messages))
            opening = len(tokenize(render_prompt(messages[:1]).removesuffix("<|assistant|>")))
            holders = [e for e in pool if e.engine and e.engine.cache.match(tokens).cached_tokens >= opening]
            if holders:
                return holders[0]
        self._round_robin += 1
        return pool[self._round_robin % len(pool)]

    def proxy_backends(self, authorization: str | None) -> tuple[int, dict[str, Any]]:
        """The in-host proxy's `GET /backends/list` (issue 23; ASSUMED the model-proxy's shape):
        its pool (VLLM_BACKEND_URLS) with each engine's readiness. `proxy-pool-stale` leaves r2's
        engines out of the answer (a pool that did not take the new engine)."""
        with self._lock:
            self.sync()
            proxy = self._containers.get(PROXY_SERVICE)
            if proxy is None or not proxy.up:
                return 502, {"error": "the inference proxy is not running"}
            token = proxy.env.get("TOKEN")
            if not token or authorization != f"Bearer {token}":
                return 401, {"error": "unauthorized"}
            pool = [n for n in proxy.proxy_pool
                    if not (self.faults.active("proxy-pool-stale") and n.endswith("-r2"))]
            backends = [{"address": f"{n}:8000", "healthy": bool((e := self._containers.get(n)) is not None and e.ready)}
                        for n in pool]
            return 200, {"domain": "local", "backends": backends}

    def relay_request(
        self, port: int, method: str, path: str, authorization: str | None, body: Any
    ) -> tuple[int, str | dict[str, Any], str, str | None]:
        """A request to the soak relay's `port`: (status, body, media type, engine reached)."""
        with self._lock:
            self.sync()
            relay = self._containers.get(RELAY_SERVICE)
            if relay is None or not relay.up:
                return 502, nginx_error_page(502, "Bad Gateway"), "text/html", None
            if relay.relay_token is None or authorization != f"Bearer {relay.relay_token}":
                return 401, nginx_error_page(401, "Authorization Required"), "text/html", None
            if not _RELAY_PATH.match(path):
                return 404, nginx_error_page(404, "Not Found"), "text/html", None
            if method not in ("GET", "POST", "HEAD"):
                return 403, nginx_error_page(403, "Forbidden"), "text/html", None
            backend = relay.relay_routes.get(port)
            if backend == device_memory.DCGM_SERVICE:  # issue 23: the #302 relay's DCGM route
                return self._dcgm_route(path, method)
            engine = self._containers.get(backend) if backend else None
            if engine is None or not engine.ready or engine.engine is None:
                return 502, nginx_error_page(502, "Bad Gateway"), "text/html", None
            if path == "/health":
                return 200, "", "text/plain", engine.name
            if path == "/v1/models":
                return (
                    200,
                    {
                        "object": "list",
                        "data": [
                            {
                                "id": SERVED_MODEL,
                                "object": "model",
                                "created": int(self.wall().timestamp()),
                                "owned_by": "sglang",
                                "root": SERVED_MODEL,
                                "max_model_len": 1048576,
                            }
                        ],
                    },
                    "application/json",
                    engine.name,
                )
            if path == "/metrics":
                return 200, self._metrics_text(engine), "text/plain; version=0.0.4", engine.name
            if path == "/v1/chat/completions" and method == "POST":
                if not isinstance(body, dict):
                    return (
                        400,
                        {"object": "error", "message": "invalid JSON body", "code": 400},
                        "application/json",
                        engine.name,
                    )
                status, out = self._engine_chat(engine, body)
                return status, out, "application/json", engine.name
            return (
                404,
                {"object": "error", "message": f"{method} {path} is not simulated", "code": 404},
                "application/json",
                engine.name,
            )

    def _dcgm_route(self, path: str, method: str) -> tuple[int, str | dict[str, Any], str, str | None]:
        dcgm = self._containers.get(device_memory.DCGM_SERVICE)
        if dcgm is None or not dcgm.up:
            return 502, nginx_error_page(502, "Bad Gateway"), "text/html", None
        if path != "/metrics" or method != "GET":
            return 404, nginx_error_page(404, "Not Found"), "text/html", dcgm.name
        text = device_memory.dcgm_text(self._containers.values(), self.host_ip)
        return 200, text, "text/plain; version=0.0.4", dcgm.name

    def dcgm_exporter_text(self) -> str | None:
        """DCGM's exporter's /metrics text while its container runs (None: not running, so a
        Prometheus scraping it holds none of its series): apps/prometheus.py."""
        with self._lock:
            self.sync()
            dcgm = self._containers.get(device_memory.DCGM_SERVICE)
            if dcgm is None or not dcgm.up:
                return None
            return device_memory.dcgm_text(self._containers.values(), self.host_ip)

    def prometheus_texts(self) -> dict[str, str]:
        """service -> its engine's /metrics text, for every ready engine: what a Prometheus
        scraping the host's engines holds now (apps/prometheus.py)."""
        with self._lock:
            self.sync()
            return {c.service: self._metrics_text(c) for c in self._containers.values()
                    if c.engine is not None and c.ready}

    def _metrics_text(self, c: Container) -> str:
        assert c.engine is not None
        k = c.engine.counters
        # SGLang's own labels only: precision, config_variant and engine_image are static scrape
        # labels that otelcol-contrib attaches (base-tier-runbook.md section 10); the engine's own
        # /metrics (what the relay returns) never carries them.
        label = f'{{model_name="{SERVED_MODEL}"}}'
        rate = k.cached_tokens / k.prompt_tokens if k.prompt_tokens else 0.0
        prof, live_n, live_aborted = self._live_traffic(c)
        rows = [
            ("sglang:num_requests_total", "counter", "Number of requests processed.", k.requests + live_n),
            *([("sglang:num_aborted_requests_total", "counter", "Number of requests aborted.", live_aborted)]
              if prof.aborts_exported else []),
            ("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
             k.prompt_tokens + live_n * live_traffic.PROMPT_TOKENS),
            (
                "sglang:generation_tokens_total",
                "counter",
                "Number of generation tokens processed.",
                k.generation_tokens + (live_n - live_aborted) * live_traffic.OUTPUT_TOKENS,
            ),
            ("sglang:cached_tokens_total", "counter", "Number of cached prompt tokens.", k.cached_tokens),
            # Assumed name: the HiCache host-tier hit counter the runbook's host-restore check reads.
            (
                "sglang:hicache_host_hit_tokens_total",
                "counter",
                "Prompt tokens restored from the HiCache host tier.",
                k.host_hit_tokens,
            ),
            ("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", round(rate, 4)),
            ("sglang:num_running_reqs", "gauge", "The number of running requests.", self.running_requests(c)),
            ("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", 0),
        ]
        out = []
        for name, kind, help_text, value in rows:
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name}{label} {value}"]
        finished = live_n - live_aborted
        hists = [(live_traffic.TTFT, live_traffic.TTFT_BUCKETS, prof.ttft_s),
                 (live_traffic.TPOT, live_traffic.TPOT_BUCKETS, prof.tpot_s),
                 (live_traffic.E2E, live_traffic.E2E_BUCKETS, prof.e2e_s)]
        live_traffic.accrue(c.engine.live_hist, prof, c.engine.slot or c.service, c.engine.live_s, hists)
        for name, bounds, _ in hists:
            out += live_traffic.histogram_lines(name, bounds, c.engine.live_hist, finished, label)
        out += live_traffic.prompt_histogram_lines(finished, label)
        out += live_traffic.http_response_lines(finished, live_aborted, c.engine.live_s)
        return "\n".join(out) + "\n"

    def _live_traffic(self, c: Container) -> tuple[live_traffic.Profile, int, int]:
        """The engine's share of the domain's live traffic since it became ready: (profile,
        requests, aborted). Time counts while the engine serves (ready, in proxy-glm53's pool, the
        serving path up), as seen at each scrape."""
        e = c.engine
        assert e is not None
        since = e.live_at if e.live_at is not None else (e.ready_at if e.ready_at is not None else c.started_at)
        proxy = self._containers.get(PROXY_SERVICE)
        if e.ready and proxy is not None and c.name in proxy.proxy_pool and self._serving_path_ok() and since is not None:
            e.live_s += max(0.0, self._now - since)
        e.live_at = self._now
        fault = e.fault
        if any(f.name == "serving-errors" and f.replica == e.slot for f in self.faults.specs):
            fault = "serving-errors"  # the replica's serving engine, whatever created it
        prof = live_traffic.profile(c.command, c.env, fault, low_traffic=self.faults.active("low-traffic"),
                                    live_noise=self.faults.active("live-noise"))
        n, aborted = live_traffic.served(prof, e.live_s)
        return prof, n, aborted
