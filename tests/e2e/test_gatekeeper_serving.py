"""Issue 21, case 11 (docker log rotation) against the simulator: every engine keeps only its last
500 log lines, so the long-running engines' start and ready lines are long gone.

Before the one serving model (orchestrator/engine/rules/serving_evidence.py) a window without the ready line
read as "not serving": the soak failed on a healthy host, an r2 failure could not roll back (its
stop guard saw no serving r1), and the stop guard let `r2.stop-old` stop the only serving engine
while r1 was in a cold start. Judged on the simulator's own record (its calls and containers).
"""

from __future__ import annotations

import asyncio

import pytest
from recording import RecordingProgress

from orchestrator.language.runbook import DEFAULT_RUNBOOK

pytestmark = pytest.mark.e2e

SPEED = 3000.0
LOG_LINES = 500
READY = "The server is fired up and ready to roll!"
STARTUP = "server_args=ServerArgs("
R1 = "model-sg-glm53-w4afp8-tp4-r1"
R2_NEW = "model-sg-glm53-w4afp8-tp4-r2"
R2_OLD = "model-sg-glm53-fp8-tp4-r2"


@pytest.fixture
def short_logs(tmp_path):
    """A gpu02 fleet whose containers keep only their last LOG_LINES log lines, and a session."""
    from orchestrator.hosts.clients.retry import RetryPolicy
    from orchestrator.service.demo import demo_settings
    from orchestrator.service.session import Session
    from orchestrator.util.clock import ScaledClock
    from orchestrator_sim import SimConfig, SimFleet

    opened = []

    def make(*faults: str):
        fleet = SimFleet(SimConfig(speed=SPEED, faults=list(faults), cold_start_s=1200, log_lines=LOG_LINES))
        fleet.__enter__()
        state = tmp_path / f"state{len(opened)}"
        state.mkdir()
        session = Session.open(demo_settings(fleet, state), clock=ScaledClock(SPEED),
                               retry=RetryPolicy(deadline_s=900, busy_wait_s=5))
        opened.append((fleet, session))
        return fleet, session

    yield make
    for fleet, session in opened:
        session.close()
        fleet.__exit__(None, None, None)


def rollout(session, progress=None):
    from orchestrator.service.admission import new_rollout
    from orchestrator.service.runner import execute

    run, rb, table = new_rollout(session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK, None)
    return asyncio.run(execute(session, run, rb, table, progress=progress or RecordingProgress(), yes=True))


def downs_of(fleet, service):
    return [c for c in fleet.calls if c.is_compose_down and service in (c.body or {}).get("services", [])]


def assert_rotated(fleet, service):
    """The precondition: the engine has run for days and its window no longer holds its start."""
    log = fleet.host.logs(service)
    assert len(log) == LOG_LINES
    assert not any(READY in ln or STARTUP in ln for ln in log), "the ready line is still in the window"
    assert fleet.host.container(service).status in ("Up 4 weeks", "Up 12 days")  # the canary: 696 h ago


def test_a_long_running_r1_whose_ready_line_rotated_out_still_serves_and_the_rollout_is_done(short_logs):
    """The soak passes on a healthy host: r1 (up 29 days, its ready line rotated out) is judged
    serving from the live evidence (docker: up longer than a cold start, no start in its window;
    both peers route to gpu02), not failed for a missing line; the rollout ends DONE."""
    fleet, session = short_logs()
    assert_rotated(fleet, R1)
    assert_rotated(fleet, R2_OLD)
    progress = RecordingProgress()
    run = rollout(session, progress)
    assert run.outcome == "DONE", run.message
    soaks = [f for kind, f in progress.events if kind == "transition" and f.get("state") == "r2.soak"]
    assert soaks and soaks[0]["event_name"] == "ok", soaks
    assert fleet.host.container(R1).ready and fleet.host.container(R2_NEW).ready
    assert fleet.check_invariants() == []


def test_an_r2_failure_rolls_back_while_the_long_running_r1_serves(short_logs):
    """An r2 failure after r2 became ready (its labels are wrong) takes r2's rollback: its stop
    guard stops the new r2 because r1 is known to serve (before: r1 read as "not serving", the
    guard refused and the run HALTED with the failing r2 left running)."""
    fleet, session = short_logs("labels-wrong:r2")
    assert_rotated(fleet, R1)
    run = rollout(session)
    assert run.outcome == "ROLLED_BACK", run.message
    assert downs_of(fleet, R2_NEW), "the new r2 was never stopped"
    assert downs_of(fleet, R1) == [], "r1 was stopped"
    assert fleet.host.container(R2_OLD).ready and fleet.host.container(R1).ready
    assert fleet.check_invariants() == []


def test_with_r1_in_a_cold_start_r2_stop_old_is_not_executed(short_logs):
    """r1 crashed and is in a cold start (docker restarted it; no run started it) while the old
    r2, up 29 days with its ready line rotated out, is the only serving engine: the stop guard
    refuses `r2.stop-old` (the peers route to gpu02 and no other engine serves, so the old r2 is
    the one serving) and the run halts with nothing stopped, saying why."""
    fleet, session = short_logs()
    assert_rotated(fleet, R2_OLD)
    fleet.host.crash(R1, hang_cold_start=True)
    run = rollout(session)
    assert run.outcome == "HALTED", run.message
    assert downs_of(fleet, R2_OLD) == [], "r2.stop-old stopped the only serving engine"
    assert [c for c in fleet.calls if c.is_compose_down] == []
    assert fleet.host.container(R2_OLD).ready
    assert f"refusing to stop {R2_OLD}" in run.message and "no other replica does" in run.message
    assert "host now:" in run.message and f"{R2_OLD} serving" in run.message
    assert f"{R1} NOT serving" in run.message


# -- "host now" says unknown when the evidence cannot decide (issue 22, issue 27) -----------------

def _cli(fleet, tmp_path, *args, env_extra=None):
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env.update(fleet.env_for_orchestrator(tmp_path / "inventory.yaml"))
    env.update({"ORCHESTRATOR_STATE_DIR": str(tmp_path / "state"), "ORCHESTRATOR_TIME_SCALE": str(SPEED)})
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], env=env, cwd=Path(__file__).resolve().parents[2],
                          capture_output=True, text=True, timeout=300)


def _host_now(text: str) -> str:
    """The CLI's last lines `HOST now:` then one indented line per replica (issue 22's format),
    as one `host now: r1: ...; r2: ...` string."""
    lines = text.splitlines()
    at = [i for i, ln in enumerate(lines) if ln.rstrip().endswith(" now:")]
    assert at, text[-2000:]
    replicas = [ln.strip() for ln in lines[at[-1] + 1:] if ln.startswith("  ")]
    return "host now: " + "; ".join(replicas)


@pytest.fixture
def sim(request):
    from orchestrator_sim import SimConfig, SimFleet

    faults = getattr(request, "param", ())
    fleet = SimFleet(SimConfig(speed=SPEED, cold_start_s=1200, faults=list(faults)))
    fleet.__enter__()
    yield fleet
    fleet.__exit__(None, None, None)


def test_a_wrong_dashboard_token_aborts_and_host_now_says_what_serves(sim, tmp_path):
    """Issue 22: the abort is right ("Nothing was changed"); both replicas served, and `host now`
    says so (their logs are read through the file that deployed them, from the action log, not
    through the new file, which does not define the old r2); never "NOT serving"."""
    r = _cli(sim, tmp_path, "rollout", "gpu02", "--tag", "v0.0.300", "--yes",
             env_extra={"ORCHESTRATOR_DASHBOARD_TOKEN": "0" * 32})
    assert r.returncode == 5, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Nothing was changed" in " ".join(r.stdout.split())  # the message is wrapped
    now = _host_now(r.stdout)
    assert "NOT serving" not in now, now
    assert now == f"host now: r1: {R1} serving; r2: {R2_OLD} serving", now
    assert [c for c in sim.calls if c.is_compose_down or (c.is_compose_up and not (c.body or {}).get("dry_run"))] == []


def test_logs_answered_500_make_host_now_unknown(sim, tmp_path):
    """Issue 27 (and issue 22's "unknown is unknown"): a service whose logs compose-manager cannot
    read (the file was never fetched on the host: HTTP 500) is "unknown" in the `host now` line,
    never "NOT serving". Here compose-manager lost its work dir, and the run aborts (a wrong
    dashboard token) before any up or dry run fetched a file again and without the env map (so
    without the soak relay's token): nothing live says which engine serves."""
    sim.host.clear_work_dir()
    r = _cli(sim, tmp_path, "rollout", "gpu02", "--tag", "v0.0.300", "--yes",
             env_extra={"ORCHESTRATOR_DASHBOARD_TOKEN": "0" * 32})
    assert r.returncode == 5, r.stdout[-2000:] + r.stderr[-2000:]
    logs = [c for c in sim.calls if c.path == "/compose/logs"]
    assert logs and all(c.status == 500 for c in logs), [(c.path, c.status) for c in logs]
    now = _host_now(r.stdout)
    assert "NOT serving" not in now, now
    assert f"r1: {R1} unknown (" in now and f"r2: {R2_OLD} unknown (" in now, now
    assert "its log could not be read" in now and "500" in now and "no such file" in now, now


@pytest.mark.parametrize("value", ["0", "lots"])
def test_a_bad_log_lines_setting_is_one_line_exit_2(value):
    """ORCHESTRATOR_SIM_LOG_LINES is the user's to set: a bad value names itself, exit 2, no
    traceback (mutation: the demo's `except ValueError` removed -> exit 1 with a traceback)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env["ORCHESTRATOR_SIM_LOG_LINES"] = value
    r = subprocess.run([sys.executable, "-m", "orchestrator.cli", "demo"], env=env, capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert r.returncode == 2, r.stdout[-1000:] + r.stderr[-1000:]
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1 and "ORCHESTRATOR_SIM_LOG_LINES" in lines[0] and "Traceback" not in r.stderr
