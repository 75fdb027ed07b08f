"""What the outside world sees: the model-proxy peers, the inference endpoint, the soak relay."""

from __future__ import annotations

import httpx
import pytest

from orchestrator_sim.testing import (
    BASE,
    CANARY,
    GPU02,
    LONG,
    NEW_R2,
    NEW_TAG,
    OLD_R2,
    OLD_TAG,
    R1,
    RELAY,
    TARGET,
)
from orchestrator_sim.testing import SimDriver as Sim

REGISTRAR = "model-proxy-registrar"


def test_both_peers_list_gpu02_healthy_under_the_long_domain_only(sim: Sim) -> None:
    for peer in ("peer-a", "peer-b"):
        long = sim.peer(peer, "/backends/list", domain=LONG).json()
        assert long["domain"] == LONG
        assert [b["healthy"] for b in long["backends"] if b["address"] == GPU02] == [True]
        base = sim.peer(peer, "/backends/list", domain=f"https://{BASE}/").json()
        assert base["domain"] == BASE and base["backends"]
        assert GPU02 not in [b["address"] for b in base["backends"]]
        count = sim.peer(peer, "/backends/count", domain=LONG).json()
        assert count == {"domain": LONG, "requested_domain": LONG, "healthy": 1, "total": 1}
        registry = sim.peer(peer, "/registry").json()
        assert GPU02 in [b["address"] for b in registry["domains"][LONG]]
        assert registry["total_backends"] == sum(len(v) for v in registry["domains"].values())
    assert sim.peer("peer-a", "/backends/list").status_code == 400


def test_peer_missing_fault(make_sim) -> None:
    sim = make_sim(faults=["peer-missing"])
    assert sim.long_listing("peer-a") and not sim.long_listing("peer-b")


def test_registrar_recreate_takes_gpu02_out_for_a_discovery_cycle(make_sim) -> None:
    sim = make_sim(discovery_cycle_s=3000.0)
    assert sim.down(OLD_TAG, CANARY, [REGISTRAR]).ok
    assert sim.long_listing("peer-a") == [] and sim.long_listing("peer-b") == []
    sim.safe_up(NEW_TAG, TARGET, [REGISTRAR])
    started = sim.fleet.host.container(REGISTRAR).started_at
    listing = sim.long_listing()
    asked = sim.fleet.calls[-1]
    if listing:  # the discovery cycle had passed by the time the peer answered
        assert asked.finished_at - started >= 3000.0
    else:
        assert asked.at - started < 3000.0
    sim.wait(sim.long_listing, "gpu02 listed again")
    assert sim.long_listing("peer-b")[0]["healthy"] is True


def test_gpu02_is_unhealthy_without_a_ready_engine_in_the_proxy_pool(sim: Sim) -> None:
    assert sim.down(OLD_TAG, CANARY, [OLD_R2]).ok
    assert sim.long_listing()[0]["healthy"] is True  # r1 still serves through the canary proxy
    assert sim.chat([{"role": "user", "content": "still there?"}]).status_code == 200
    assert sim.down(OLD_TAG, CANARY, [R1]).ok
    assert sim.long_listing()[0]["healthy"] is False
    assert sim.peer("peer-a", "/backends/count", domain=LONG).json()["healthy"] == 0
    assert sim.chat([{"role": "user", "content": "anyone?"}]).status_code == 503
    problems = sim.fleet.check_invariants()
    assert any("both replica slots were not serving" in p for p in problems)
    assert not any("both replica slots" in p for p in sim.fleet.check_invariants(allow_outage=True))


def test_the_new_r2_serves_only_once_the_proxy_pools_it(sim: Sim) -> None:
    sim.swap_r2()
    served = {
        sim.chat([{"role": "user", "content": f"question {i}"}]).json()["model"] and sim.fleet.calls[-1].effects[-1]
        for i in range(6)
    }
    assert served == {f"served-by:{R1}"}  # the canary proxy pools r1 and the removed FP8 r2
    sim.safe_up(NEW_TAG, TARGET, ["proxy-glm53", "otelcol-contrib", "dcgm-glm53"])
    sim.wait(sim.long_listing, "gpu02 listed")
    served = set()
    for i in range(6):
        assert sim.chat([{"role": "user", "content": f"another question {i}"}]).status_code == 200
        served.add(sim.fleet.calls[-1].effects[-1])
    assert served == {f"served-by:{R1}", f"served-by:{NEW_R2}"}
    assert sim.fleet.check_invariants() == []


def test_cached_tokens_on_a_follow_up(sim: Sim) -> None:
    first_turn = [{"role": "user", "content": "Read this long contract and list the parties. " * 40}]
    a = sim.chat(first_turn).json()
    assert a["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    follow_up = first_turn + [a["choices"][0]["message"], {"role": "user", "content": "Which party pays?"}]
    b = sim.chat(follow_up).json()
    cached = b["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert a["usage"]["prompt_tokens"] <= cached < b["usage"]["prompt_tokens"]
    # deterministic at temperature 0
    again = sim.chat(first_turn).json()
    assert again["choices"][0]["message"]["content"] == a["choices"][0]["message"]["content"]
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


def test_cache_miss_fault(make_sim) -> None:
    sim = make_sim(faults=["cache-miss"])
    turn = [{"role": "user", "content": "hello there " * 20}]
    sim.chat(turn)
    assert sim.chat(turn).json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_completion_fails_fault(make_sim) -> None:
    sim = make_sim(faults=["completion-fails"])
    r = sim.chat([{"role": "user", "content": "hi"}])
    assert r.status_code == 500 and "error" in r.json()


def test_the_leftover_relay_routes_8009_to_the_fp8_r2_until_restarted_from_the_new_file(sim: Sim) -> None:
    assert sim.relay(8008, "GET", "/health").status_code == 200
    assert sim.fleet.calls[-1].effects == [f"served-by:{R1}"]
    assert sim.relay(8009, "GET", "/v1/models").json()["data"][0]["id"] == "z-ai/glm-5.3-flash"
    assert sim.fleet.calls[-1].effects == [f"served-by:{OLD_R2}"]
    assert sim.relay(8009, "GET", "/health", token="wrong").status_code == 401
    assert sim.relay(8009, "GET", "/elsewhere").status_code == 404
    sim.swap_r2()
    assert sim.relay(8009, "GET", "/health").status_code == 502  # still aims at the removed FP8 r2
    dry = sim.up(NEW_TAG, TARGET, [RELAY], dry_run=True, force_recreate=True)  # config-only change (#11900)
    assert any(RELAY in line and "Recreated" in line for line in dry.lines)
    sim.safe_up(NEW_TAG, TARGET, [RELAY], force_recreate=True)
    sim.wait(lambda: sim.relay(8009, "GET", "/health").status_code == 200, "the relay back")
    assert sim.fleet.calls[-1].effects == [f"served-by:{NEW_R2}"]
    body = {
        "model": "z-ai/glm-5.3-flash",
        "temperature": 0,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "Say the word ready."}],
    }
    one = sim.relay(8009, "POST", "/v1/chat/completions", json=body).json()
    two = sim.relay(8009, "POST", "/v1/chat/completions", json=body).json()
    assert one["choices"][0]["message"]["content"] == two["choices"][0]["message"]["content"]
    assert "sglang:num_requests_total" in sim.relay(8009, "GET", "/metrics").text
    assert sim.down(NEW_TAG, TARGET, [RELAY]).ok
    sim.wait(lambda: _status(sim, 8009) is None, "the relay port to close", timeout=5)
    with pytest.raises(httpx.ConnectError):
        httpx.get(sim.fleet.urls.relay[8009] + "/health")  # a fresh connection is refused


def test_hicache_host_tier_hits_show_in_the_metrics(sim: Sim) -> None:
    def ask(text: str) -> dict:
        body = {
            "model": "z-ai/glm-5.3-flash",
            "temperature": 0,
            "max_tokens": 4,
            "messages": [{"role": "user", "content": text}],
        }
        return sim.relay(8009, "POST", "/v1/chat/completions", json=body).json()

    def host_hits() -> int:
        for line in sim.relay(8009, "GET", "/metrics").text.splitlines():
            if line.startswith("sglang:hicache_host_hit_tokens_total"):
                return int(float(line.split()[-1]))
        raise AssertionError("no host-hit counter")

    first = "The first document, which will leave the device pool. " * 20
    ask(first)
    for i in range(6):  # push the first prompt out of the device pool into the host tier
        ask(f"Unrelated document number {i}. " * 20)
    assert host_hits() == 0
    again = ask(first)
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert host_hits() > 0


def test_the_relay_ports_close_and_reopen_with_the_container(sim: Sim) -> None:
    for _ in range(2):
        assert sim.down(OLD_TAG, CANARY, [RELAY]).ok
        sim.wait(lambda: _status(sim, 8008) is None, "the relay port to close", timeout=5)
        sim.safe_up(OLD_TAG, CANARY, [RELAY], force_recreate=True)
        sim.wait(lambda: _status(sim, 8008) == 200, "the relay back")


def _status(sim: Sim, port: int) -> int | None:
    """The relay's answer to /health, or None while nothing listens (refused, or reset while closing)."""
    try:
        return sim.relay(port, "GET", "/health").status_code
    except httpx.TransportError:
        return None


def test_the_relay_port_follows_the_container_before_the_compose_answer_ends(sim: Sim) -> None:
    """Issue 22 (a loaded machine): the relay's port opens (closes) before the up (down) that
    starts (removes) its container answers, as on a host, so that the start-up latency of the
    simulator's own listener is never counted by the caller as simulated minutes (5 minutes of
    relay checks are 0.1 s of real time at x3000). No waiting here: the very next connection."""
    for _ in range(3):
        assert sim.down(OLD_TAG, CANARY, [RELAY]).ok
        with pytest.raises(httpx.ConnectError):
            httpx.get(sim.fleet.urls.relay[8008] + "/health")  # refused at once
        sim.safe_up(OLD_TAG, CANARY, [RELAY])
        assert sim.relay(8008, "GET", "/health").status_code == 200  # answers at once
