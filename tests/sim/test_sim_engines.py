"""The simulated SGLang engines: startup log, HiCache budget rule, and the engine faults."""

from __future__ import annotations

import re

from sim_time import SteppedClock

from orchestrator_sim.host.hicache_budget import GIB
from orchestrator_sim.testing import CANARY, NEW_R2, NEW_TAG, OLD_R2, OLD_TAG, R1, TARGET
from orchestrator_sim.testing import SimDriver as Sim

RANK_406 = 108984795136
TS = r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"


def _body(log: str, container: str) -> list[str]:
    prefix = f"{container}  | "
    lines = [line for line in log.split("\n") if line]  # not splitlines(): progress bars carry \r
    assert lines and all(line.startswith(prefix) for line in lines)
    return [line[len(prefix) :] for line in lines]


def _rank_budgets(lines: list[str]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for line in lines:
        m = re.match(TS + r" TP(\d)\] HiCache startup RAM: budget=(\S+) ranks=4 rank_budget_bytes=(\d+)$", line)
        if m:
            out.setdefault(int(m.group(1)), []).append(int(m.group(3)))
    return out


def test_new_engine_startup_log_at_406gib(sim: Sim) -> None:
    sim.swap_r2()
    lines = _body(sim.logs(NEW_R2), NEW_R2)
    assert _rank_budgets(lines) == {r: [RANK_406] for r in range(4)}
    assert all("budget=406GiB ranks=4" in line for line in lines if "rank_budget_bytes=" in line)

    def first(pattern: str) -> int:
        return next(i for i, line in enumerate(lines) if re.search(pattern, line))

    order = [
        first(r"TP0\] Init torch distributed ends\. mem usage=\d+\.\d\d GB$"),
        first(r"TP0\] Load weight begin\."),
        first(r"TP0\] Load weight end\."),
        first(r"TP0\] KV Cache is allocated\."),
        first(r"TP0\] Memory pool end\."),
        first(r"TP0\] HiCache startup RAM: "),
        first(r"TP0\] HiCache startup RAM allocated$"),
        first(r"TP0\] Capture cuda graph begin\."),
        first(r"TP0\] Capture cuda graph end\."),
        first(TS + r"\] The server is fired up and ready to roll!$"),
    ]
    assert order == sorted(order)
    for rank in range(4):
        assert sum(bool(re.match(TS + rf" TP{rank}\] HiCache startup RAM allocated$", x)) for x in lines) == 1
        assert any(re.match(TS + rf" TP{rank}\] Capture cuda graph end\.", x) for x in lines)
    assert any("\r" in line for line in lines)  # the progress bar
    view = sim.fleet.host.container(NEW_R2)
    assert view.booked_bytes == 406 * GIB


def test_steady_state_noise_repeats_identical_lines(sim: Sim) -> None:
    sim.wait_sim(400)
    lines = _body(sim.logs(R1, file=CANARY, tail=50), R1)
    assert len(lines) != len(set(lines))
    assert any("Decode batch" in line or '"GET /health HTTP/1.1" 200 OK' in line for line in lines)


def test_the_old_r2_logged_its_80_percent_budget(make_sim) -> None:
    sim = make_sim(log_lines=None)  # its whole start: no log rotation (ORCHESTRATOR_SIM_LOG_LINES)
    lines = _body(sim.logs(OLD_R2, file=CANARY), OLD_R2)
    assert _rank_budgets(lines) == {r: [262552089395] for r in range(4)}
    assert all("budget=80%" in line for line in lines if "rank_budget_bytes" in line)
    r1 = _body(sim.logs(R1, file=CANARY), R1)
    assert not _rank_budgets(r1) and any("fired up and ready to roll" in x for x in r1)  # r1: no HiCache


def test_a_percentage_resolves_against_what_is_left_in_start_order(sim: Sim) -> None:
    sim.fleet.set_env_var("GLM53_HICACHE_RAM_BUDGET", "40%")
    sim.swap_r2()
    assert sim.down(OLD_TAG, CANARY, [R1]).ok
    sim.safe_up(NEW_TAG, TARGET, [R1])
    sim.wait_ready(R1)
    total = 1223 * GIB
    r2_replica = total * 40 // 100
    r1_replica = (total - r2_replica) * 40 // 100
    r2 = _rank_budgets(_body(sim.logs(NEW_R2), NEW_R2))
    r1 = _rank_budgets(_body(sim.logs(R1), R1))
    assert r2 == {r: [r2_replica // 4] for r in range(4)}
    assert r1 == {r: [r1_replica // 4] for r in range(4)}
    assert round(r2_replica / GIB) == 489 and round(r1_replica / GIB) == 294


def test_budget_no_fit_fails_the_second_engine_with_a_restart_loop(make_sim) -> None:
    # a back-off of 3 real seconds at x12000: long enough that a loaded machine's poll cannot miss it
    sim = make_sim(faults=["budget-no-fit"], restart_delay_s=36000.0)
    assert sim.fleet.dashboard_env["GLM53_HICACHE_RAM_BUDGET"] == "650GiB"
    sim.swap_r2()
    assert sim.down(OLD_TAG, CANARY, [R1]).ok
    sim.safe_up(NEW_TAG, TARGET, [R1])
    sim.wait(lambda: "does not fit" in sim.logs(R1), "the budget failure")
    assert "RuntimeError: HiCache startup RAM budget does not fit" in sim.logs(R1)

    def restarting() -> dict | None:
        row = sim.ps()[R1]
        return row if row["State"] == "restarting" else None

    assert sim.wait(restarting, "the restart loop")["Status"].startswith("Restarting (1) ")
    assert sim.ready(NEW_R2) and not sim.ready(R1)


def test_oom_fault(make_sim) -> None:
    sim = make_sim(faults=["oom"])
    sim.swap_r2(wait_ready=False)
    sim.wait(lambda: "torch.OutOfMemoryError: CUDA out of memory" in sim.logs(NEW_R2), "the OOM")
    sim.wait(lambda: sim.fleet.host.container(NEW_R2).restart_count >= 1, "a restart")
    assert not any(c.slot == "r2" and c.serving for c in sim.fleet.timeline.changes())
    # the canary engines are never faulted: a rollback of r2 works
    assert sim.down(NEW_TAG, TARGET, [NEW_R2]).ok
    sim.safe_up(OLD_TAG, CANARY, [OLD_R2])
    sim.wait_ready(OLD_R2)
    assert sim.fleet.check_invariants() == []


def test_oom_fault_on_r1_leaves_r2_alone(make_sim) -> None:
    sim = make_sim(faults=["oom:r1"])
    sim.swap_r2()
    assert "OutOfMemoryError" not in sim.logs(NEW_R2)


def test_cuda_801_fault(make_sim) -> None:
    sim = make_sim(faults=["cuda-801"])
    sim.swap_r2(wait_ready=False)
    sim.wait(lambda: "CUDA error 801" in sim.logs(NEW_R2), "CUDA error 801")
    log = sim.logs(NEW_R2)
    assert "HiCache startup RAM allocated" not in log
    assert log.index("rank_budget_bytes=") < log.index("CUDA error 801")
    assert not sim.ready(NEW_R2)


def test_rank_budget_wrong_fault(make_sim) -> None:
    sim = make_sim(faults=["rank-budget-wrong"])
    assert "GLM53_HICACHE_RAM_BUDGET" not in sim.fleet.dashboard_env
    sim.swap_r2()
    budgets = _rank_budgets(_body(sim.logs(NEW_R2), NEW_R2))
    assert budgets == {r: [101500000000] for r in range(4)}


def test_restart_loop_fault(make_sim) -> None:
    sim = make_sim(faults=["restart-loop"], restart_delay_s=12000.0)  # 1 real second: a poll cannot miss it
    sim.swap_r2(wait_ready=False)
    first_id = sim.ps()[NEW_R2]["ID"]

    def restarting() -> dict | None:
        row = sim.ps()[NEW_R2]
        return row if row["State"] == "restarting" else None

    row = sim.wait(restarting, "restarting")
    assert row["ID"] == first_id
    assert re.fullmatch(r"Restarting \(1\) .+ ago", row["Status"])
    sim.wait(lambda: sim.fleet.host.container(NEW_R2).restart_count >= 2, "two restarts")
    log = sim.logs(NEW_R2)
    assert log.count("TP0] Init torch distributed begin.") >= 2  # the log starts over on every restart
    assert "NCCL error" in log and sim.ps()[NEW_R2]["ID"] == first_id


def test_cold_start_hang_fault(make_sim) -> None:
    sim = make_sim(faults=["cold-start-hang"])
    sim.swap_r2(wait_ready=False)
    sim.wait(lambda: "Capture cuda graph begin" in sim.logs(NEW_R2), "the graph capture")
    sim.wait_sim(3 * 600)
    log = sim.logs(NEW_R2)
    assert "fired up and ready" not in log and "Capture cuda graph end" not in log
    assert sim.ps()[NEW_R2]["State"] == "running" and not sim.ready(NEW_R2)


# -- docker's log rotation (SimConfig.log_lines / ORCHESTRATOR_SIM_LOG_LINES) -----------------------

READY_LINE = "The server is fired up and ready to roll!"
STARTUP_LINE = "server_args=ServerArgs("


def test_log_rotation_keeps_only_the_last_n_lines(make_sim) -> None:
    """A long-running engine has logged far more than the window since its ready line: with
    rotation its start and ready line are gone; a new engine's start is in its (short) window."""
    sim = make_sim(log_lines=500)
    for svc in (R1, OLD_R2):
        lines = _body(sim.logs(svc, file=CANARY), svc)
        assert len(lines) == 500
        assert not any(READY_LINE in ln or STARTUP_LINE in ln for ln in lines)
        assert all('"GET /health HTTP/1.1" 200 OK' in ln or "Decode batch" in ln for ln in lines)
    sim.swap_r2()
    new = _body(sim.logs(NEW_R2), NEW_R2)
    assert len(new) < 500 and STARTUP_LINE in new[0] and any(READY_LINE in ln for ln in new)
    sim.wait_sim(3 * 3600)  # hours of chatter: the window never grows past the rotation
    assert len(sim.fleet.host.logs(R1)) == 500


def test_without_rotation_an_engine_keeps_its_start(make_sim) -> None:
    sim = make_sim(log_lines=None)
    lines = _body(sim.logs(R1, file=CANARY), R1)
    assert STARTUP_LINE in lines[0] and any(READY_LINE in ln for ln in lines)


def test_log_lines_default_comes_from_the_environment(monkeypatch) -> None:
    import pytest

    from orchestrator_sim import SimConfig
    from orchestrator_sim.fleet.sim_fleet import LOG_LINES_ENV

    monkeypatch.setenv(LOG_LINES_ENV, "123")
    assert SimConfig().log_lines == 123
    monkeypatch.setenv(LOG_LINES_ENV, "")
    assert SimConfig().log_lines is None
    for bad in ("0", "lots"):
        monkeypatch.setenv(LOG_LINES_ENV, bad)
        with pytest.raises(ValueError, match=LOG_LINES_ENV):
            SimConfig()


def test_a_crashed_engine_restarts_into_a_cold_start_that_can_hang(make_sim) -> None:
    clock = SteppedClock()  # "restarting" lasts a few simulated seconds: no real time may pass them
    sim = make_sim(clock=clock, log_lines=500)
    first = sim.fleet.host.container(R1).id
    sim.fleet.host.crash(R1, hang_cold_start=True)
    assert sim.fleet.host.container(R1).state == "restarting"
    clock.t += 2 * 600  # twice the cold start: it never becomes ready
    view = sim.fleet.host.container(R1)
    assert view.state == "running" and not view.ready and view.id == first  # the same container, restarted
    lines = _body(sim.logs(R1, file=CANARY), R1)
    assert any("NCCL error" in ln for ln in lines)
    assert STARTUP_LINE in [ln for ln in lines if STARTUP_LINE in ln][-1]
    assert not any(READY_LINE in ln for ln in lines)


def test_the_startup_line_says_the_chunk_size_the_command_gives(make_sim) -> None:
    """SGLang's server_args line carries chunked_prefill_size (what a `markers:` gate reads to check
    the change on the running engine): the command's --chunked-prefill-size, None without one."""
    from datetime import datetime

    from orchestrator_sim.host import sglang_log

    sim = make_sim(log_lines=None)
    command = sim.fleet.host._containers[R1].command
    want = re.search(r"--chunked-prefill-size[ =](\S+)", command)
    [line] = [ln for ln in _body(sim.logs(R1, file=CANARY), R1) if STARTUP_LINE in ln]
    assert f"chunked_prefill_size={want.group(1) if want else 'None'}," in line
    at = datetime(2026, 12, 2)
    assert "chunked_prefill_size=16384," in sglang_log.args_lines(at, "m", "/p", "a:1", "16384")[0]
    assert "chunked_prefill_size=None," in sglang_log.args_lines(at, "m", "/p", "a:1")[0]
