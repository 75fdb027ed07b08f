"""TP2 engines on the simulated gpu02 (the #332 canary's r2a on GPUs 4,5 and r2b on 6,7, tag
v0.0.332): each logs its own two ranks and splits its HiCache budget over them; an engine whose GPUs
another running engine still holds runs out of memory at weight loading, whatever the two engines'
sizes; a compose call is held to the env map as the dashboard served it when the call was sent.

Mutation list (each guard disabled in the source, the named test seen failing, the source restored):
- host/sglang_log.ranks_of returning RANKS -> test_a_tp2_engine_logs_two_ranks_with_half_its_budget_each;
- host/engines.py's GPU-overlap check put back to replica slots -> test_a_tp2_engine_on_gpus_the_tp4_r2_still_holds_fails_to_load;
- fleet.env_at / invariants' env at the call's time -> test_the_env_map_is_judged_as_it_was_when_each_call_was_sent.
"""

from __future__ import annotations

import re

from orchestrator_sim.record.invariants import check_invariants
from orchestrator_sim.testing import SimDriver

TAG = "v0.0.332"
FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"
R2 = "model-sg-glm53-w4afp8-tp4-r2"
R2A = "model-sg-glm53-w4afp8-tp2-r2a"
R2B = "model-sg-glm53-w4afp8-tp2-r2b"
RANK_325_OVER_2 = 325 * 2**30 // 2


def _after_294(make_sim) -> SimDriver:
    return make_sim(initial="long-context", log_lines=None)


def test_a_tp2_engine_logs_two_ranks_with_half_its_budget_each(make_sim) -> None:
    sim = _after_294(make_sim)
    assert sim.down("v0.0.300", FILE, [R2]).ok
    sim.safe_up(TAG, FILE, [R2A, R2B])
    sim.wait_ready(R2A)
    sim.wait_ready(R2B)
    for name in (R2A, R2B):
        log = sim.logs(name, file=FILE)
        budgets = re.findall(r" TP(\d)\] HiCache startup RAM: budget=325GiB ranks=(\d) rank_budget_bytes=(\d+)", log)
        assert budgets == [("0", "2", str(RANK_325_OVER_2)), ("1", "2", str(RANK_325_OVER_2))], name
        assert "tp_size=2, ep_size=2" in log and " TP2] " not in log and " TP3] " not in log, name
        assert sim.host.container(name).booked_bytes == 325 * 2**30


def test_a_tp2_engine_on_gpus_the_tp4_r2_still_holds_fails_to_load(make_sim) -> None:
    sim = _after_294(make_sim)
    sim.safe_up(TAG, FILE, [R2A])  # the TP4 r2 (GPUs 4-7) still runs: r2a's GPUs 4,5 are taken
    sim.wait(lambda: sim.host.container(R2A).exit_code != 0 or sim.host.container(R2A).restart_count > 0,
             "r2a to fail at weight loading")
    assert "torch.OutOfMemoryError: CUDA out of memory" in sim.logs(R2A, file=FILE)
    assert sim.ready(R2)


def test_the_env_map_is_judged_as_it_was_when_each_call_was_sent(make_sim) -> None:
    sim = _after_294(make_sim)
    assert sim.up(TAG, FILE, [R2A], dry_run=True).ok  # sent with the map as it is now
    sim.fleet.set_env_var("GLM53_BACKEND_URLS", "http://model-sg-glm53-w4afp8-tp4-r1:8000")
    assert sim.fleet.check_invariants() == []  # the earlier call passed the map of its time whole
    # judged against the map as it is now instead, that call would have left a key out
    calls = [c for c in sim.fleet.calls if c.host in ("gpu02", "")]
    assert any("missing GLM53_BACKEND_URLS" in f for f in check_invariants(calls, dashboard_env=sim.fleet.host_env("gpu02")))
