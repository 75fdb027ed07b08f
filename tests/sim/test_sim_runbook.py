"""The whole gpu02 runbook, and its rollback, driven by hand against the simulator: the sim must
let a correct procedure through with a clean invariant check and land in the expected state."""

from __future__ import annotations

from orchestrator_sim.testing import (
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

SIDECARS = ["proxy-glm53", "otelcol-contrib", "dcgm-glm53"]
COLLECTOR = "otelcol-contrib"  # its only change between the files is its inline config (#11900)


def _sidecars(sim: Sim, tag: str, file: str) -> None:
    """The runbook's sidecar steps: proxy and exporter, then the collector force-recreated alone."""
    sim.safe_up(tag, file, [s for s in SIDECARS if s != COLLECTOR])
    sim.safe_up(tag, file, [COLLECTOR], force_recreate=True)
RECONCILE = ["model-downloader", "nginx", "model-proxy-registrar", "proxy-glm53", "dcgm-glm53", "otelcol-contrib"]


def _verify(sim: Sim, port: int, engine: str) -> None:
    sim.safe_up(NEW_TAG, TARGET, [RELAY], force_recreate=True)
    sim.wait(lambda: sim.relay(port, "GET", "/health").status_code == 200, f"relay :{port}")
    assert sim.fleet.calls[-1].effects == [f"served-by:{engine}"]
    assert sim.relay(port, "GET", "/v1/models").status_code == 200
    assert sim.down(NEW_TAG, TARGET, [RELAY]).ok


def test_the_full_rollout_keeps_every_invariant(sim: Sim) -> None:
    # r2 first, while r1 serves
    sim.swap_r2()
    assert "rank_budget_bytes=108984795136" in sim.logs(NEW_R2)
    _verify(sim, 8009, NEW_R2)
    _sidecars(sim, NEW_TAG, TARGET)
    sim.wait(sim.long_listing, "gpu02 listed")
    first = [{"role": "user", "content": "A long shared prefix for the cache check. " * 30}]
    a = sim.chat(first).json()
    b = sim.chat(first + [a["choices"][0]["message"], {"role": "user", "content": "next"}]).json()
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    # then r1, with the new file
    assert sim.down(NEW_TAG, TARGET, [R1]).ok
    sim.safe_up(NEW_TAG, TARGET, [R1])
    sim.wait_ready(R1)
    assert sim.logs(R1).count("rank_budget_bytes=108984795136") == 4
    _verify(sim, 8008, R1)
    # reconcile what is still on an older definition
    dry = sim.up(NEW_TAG, TARGET, RECONCILE, dry_run=True)
    stale = sorted(line.split()[4] for line in dry.lines if line.endswith("  Recreated"))
    assert dry.plan["plan"]["recreate"] == ["Container nginx"]
    assert stale == ["nginx"]
    sim.safe_up(NEW_TAG, TARGET, ["nginx"])
    sim.wait(lambda: sim.long_listing() and sim.long_listing()[0]["healthy"], "healthy again")

    ps = sim.ps()
    assert OLD_R2 not in ps and RELAY not in ps
    for name in (R1, NEW_R2, "nginx", *SIDECARS):
        view = sim.fleet.host.container(name)
        assert (view.tag, view.file) == (NEW_TAG, TARGET), name
    assert sim.fleet.host.container("model-proxy-registrar").tag == OLD_TAG  # same definition: untouched
    for peer in ("peer-a", "peer-b"):
        assert [b["address"] for b in sim.peer(peer, "/backends/list", domain=LONG).json()["backends"]] == [GPU02]
    assert sim.fleet.host.booked_bytes() == 2 * 406 * 1024**3
    assert sim.fleet.check_invariants() == []
    assert sim.fleet.host.orphan_removals() == []


def test_rolling_r2_back_keeps_every_invariant(sim: Sim) -> None:
    sim.swap_r2()
    _sidecars(sim, NEW_TAG, TARGET)
    # rollback of r2: down the new engine with the new file, the previous engine from the previous file
    assert sim.down(NEW_TAG, TARGET, [NEW_R2]).ok
    sim.safe_up(OLD_TAG, CANARY, [OLD_R2])
    sim.wait_ready(OLD_R2)
    _sidecars(sim, OLD_TAG, CANARY)
    for name in (OLD_R2, *SIDECARS):
        assert sim.fleet.host.container(name).tag == OLD_TAG, name
    assert NEW_R2 not in sim.ps()
    assert sim.fleet.check_invariants() == []
