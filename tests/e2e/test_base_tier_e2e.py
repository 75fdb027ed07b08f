"""The base tier on the simulator (issue 15): gpu03, gpu04 and gpu23 move to W4AFP8 one host at a
time, after gpu02's long-context run; each new gate's fault ends in its documented state.

Judged on the simulator's own record (its calls per host, its containers, the peers' lists and
its invariant checker), never on what the orchestrator says about itself.
"""

from __future__ import annotations

import asyncio

import pytest
from recording import RecordingProgress
from waiting import wait_until

from orchestrator.engine.fleet import journal_overrides, refuse_unmet_prerequisites, run_fleet
from orchestrator.language.runbook import DEFAULT_RUNBOOK, load_runbook
from orchestrator.util.user_errors import Refused
from orchestrator_sim import BASE_HOSTS, BASE_TARGET_TAG

pytestmark = pytest.mark.e2e

RUNBOOK = "base-glm53-w4afp8"
RB = load_runbook(RUNBOOK)
FP8 = ("model-sg-glm53-fp8-tp4-r1", "model-sg-glm53-fp8-tp4-r2")
W4 = ("model-sg-glm53-w4afp8-tp4-r1", "model-sg-glm53-w4afp8-tp4-r2")
REGISTRAR = "model-proxy-registrar"


def execute_run(e, run, rb, table, *, soak: float | None = 0.0):
    from orchestrator.service.runner import execute

    return asyncio.run(execute(e.session, run, rb, table, progress=RecordingProgress(), yes=True, soak=soak))


def rollout(e, host: str, *, overrides=("gpu02",), soak: float | None = 0.0):
    """One base host's rollout; gpu02's prerequisite overridden by name unless told otherwise."""
    from orchestrator.service.admission import new_rollout

    run, rb, table = new_rollout(e.session, host, BASE_TARGET_TAG, RUNBOOK)
    journal_overrides(e.session.journal, run, overrides, "test")
    return execute_run(e, run, rb, table, soak=soak)


def mutating(fleet, host: str, after_seq: int = 0):
    return [c for c in fleet.calls if c.host == host and c.seq > after_seq
            and ((c.is_compose_up and not (c.body or {}).get("dry_run")) or c.is_compose_down)]


def running(fleet, host: str) -> dict[str, object]:
    return {c.service: c for c in fleet.hosts[host].containers() if c.state in ("running", "restarting")}


def last_seq(fleet) -> int:
    return max((c.seq for c in fleet.calls), default=0)


def serving_the_domain(e, host: str) -> bool:
    """The simulator's own record: the host registered on the peers with a ready engine behind it."""
    return e.fleet.hosts[host].domain_serving[-1][1]


def on_fp8_and_registered(e, host: str) -> None:
    run = running(e.fleet, host)
    assert all(s in run for s in FP8) and not any(s in run for s in W4), sorted(run)
    assert REGISTRAR in run and serving_the_domain(e, host)


def on_w4afp8(e, host: str) -> None:
    run = running(e.fleet, host)
    assert all(s in run for s in W4) and not any(s in run for s in FP8), sorted(run)
    assert REGISTRAR in run and serving_the_domain(e, host)


def test_fleet_of_three_base_hosts_after_gpu02_ends_done(e2e_factory):
    """gpu02's long-context run first (the real prerequisite, no override), then the fleet: each
    base host DONE, one at a time (no call that changes a host before the previous host ended),
    the invariants of every host and of the base pool held throughout."""
    from orchestrator.service.admission import new_rollout

    e = e2e_factory(hosts=("gpu02", *BASE_HOSTS))
    run, rb, table = new_rollout(e.session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK)
    assert execute_run(e, run, rb, table).outcome == "DONE"
    refuse_unmet_prerequisites(RB, e.session.journal, [])  # gate zero holds now

    spans: dict[str, tuple[int, int]] = {}

    def one(host: str):
        start = last_seq(e.fleet)
        final = rollout(e, host, overrides=(), soak=None)  # the runbook's own 2 h soak, approved by --yes
        spans[host] = (start, last_seq(e.fleet))
        return final

    result = run_fleet(list(BASE_HOSTS), one)
    assert result.outcome == "DONE", result.summary(BASE_TARGET_TAG, RUNBOOK)
    for host in BASE_HOSTS:
        on_w4afp8(e, host)
        seqs = [c.seq for c in mutating(e.fleet, host)]
        assert seqs and spans[host][0] < min(seqs) and max(seqs) <= spans[host][1], host  # only inside its own run
    assert e.fleet.check_invariants() == []


def test_a_fleet_is_refused_while_gpu02_has_not_run(e2e_factory):
    """Gate zero: no gpu02 long-context run DONE in the journal -> the fleet refuses before any
    host (exit 5); a single host's rollout without the override is ABORTED in preflight."""
    e = e2e_factory(hosts=BASE_HOSTS)
    with pytest.raises(Refused, match="gpu02: no gpu02-glm53-w4afp8-long-context rollout in the journal"):
        refuse_unmet_prerequisites(RB, e.session.journal, [])
    final = rollout(e, "gpu03", overrides=())
    assert final.outcome == "ABORTED" and "prerequisite not met" in final.message, final.message
    assert mutating(e.fleet, "gpu03") == []
    on_fp8_and_registered(e, "gpu03")


def test_capacity_guard_refuses_while_another_base_host_is_unhealthy(e2e_factory):
    e = e2e_factory("host-unhealthy@gpu23", hosts=BASE_HOSTS)
    final = rollout(e, "gpu03")
    assert final.outcome == "ABORTED", final.message
    assert "gpu23" in final.message and "healthy" in final.message
    assert mutating(e.fleet, "gpu03") == []
    on_fp8_and_registered(e, "gpu03")


def test_a_finished_base_host_is_not_touched_again(e2e_factory):
    e = e2e_factory(hosts=BASE_HOSTS)
    assert rollout(e, "gpu03").outcome == "DONE"
    before = {s: c.id for s, c in running(e.fleet, "gpu03").items()}
    mark = last_seq(e.fleet)
    again = rollout(e, "gpu03")
    assert again.outcome == "DONE" and "nothing to do" in again.message, again.message
    assert mutating(e.fleet, "gpu03", mark) == []
    assert {s: c.id for s, c in running(e.fleet, "gpu03").items()} == before


def test_the_fleet_stops_at_the_first_host_that_is_not_done(e2e_factory):
    e = e2e_factory("perception-fails@gpu04", hosts=BASE_HOSTS)
    result = run_fleet(list(BASE_HOSTS), lambda h: rollout(e, h))
    assert [r.outcome for r in result.runs] == ["DONE", "ROLLED_BACK"]
    assert result.stopped_at == "gpu04" and result.not_started == ["gpu23"]
    assert mutating(e.fleet, "gpu23") == []
    on_w4afp8(e, "gpu03")
    on_fp8_and_registered(e, "gpu04")
    assert e.fleet.check_invariants() == []


# Each new gate's failing fault and the state the runbook documents for it.
GATE_FAULTS = [
    # the snapshot could not be pre-staged: nothing else changed, the FP8 engines serve (exit 5)
    ("downloader-fails@gpu03", "ABORTED", "prestage.downloader-done", on_fp8_and_registered),
    # in-flight requests never fall near zero: the drain phase's rollback rejoins (nothing stopped)
    ("drain-stuck@gpu03", "ROLLED_BACK", "drain.drain-r1", on_fp8_and_registered),
    ("perception-fails@gpu03", "ROLLED_BACK", "switch.perception-check", on_fp8_and_registered),
    ("labels-wrong:r2@gpu03", "ROLLED_BACK", "switch.labels-r2", on_fp8_and_registered),
]


@pytest.mark.parametrize("fault,outcome,failed_at,host_after", GATE_FAULTS, ids=[f[0] for f in GATE_FAULTS])
def test_each_base_gate_fault_ends_in_its_documented_state(e2e_factory, fault, outcome, failed_at, host_after):
    e = e2e_factory(fault, hosts=BASE_HOSTS)
    final = rollout(e, "gpu03")
    assert final.outcome == outcome, final.message
    assert failed_at in final.message, final.message
    host_after(e, "gpu03")
    for other in ("gpu04", "gpu23"):
        assert mutating(e.fleet, other) == []
    assert e.fleet.check_invariants() == []


def test_a_registrar_that_never_rejoins_halts_for_a_human(e2e_factory):
    """The W4AFP8 engines serve but the host never re-registers: the rollback goes back to FP8 and
    its own rejoin cannot be confirmed either (the fault holds for every registrar): HALTED, the
    FP8 engines running, the host out of the pool for a human to look at."""
    e = e2e_factory("no-rejoin@gpu03", hosts=BASE_HOSTS)
    final = rollout(e, "gpu03")
    assert final.outcome == "HALTED", final.message
    assert "switch.rejoined" in final.message
    # what works next, and the truth about traffic: engines up, but out of the pool
    assert f"orchestrate resume {final.run_id} --retry` starts phase switch again, at capacity.others-serve" in final.message
    assert "NOT in any pool on the model-proxy peers" in final.message
    run = running(e.fleet, "gpu03")
    assert all(s in run for s in FP8) and not any(s in run for s in W4)
    assert not serving_the_domain(e, "gpu03")  # out of the pool, said so: a human looks at the registrar
    assert e.fleet.check_invariants() == []


def test_a_dist_store_error_on_one_engine_is_remedied_and_the_host_ends_done(e2e_factory):
    """r2's first start hangs after DistStoreError: r2 alone is stopped, started again once r1
    serves, and the host goes on to DONE (no whole-host rollback)."""
    e = e2e_factory("dist-store-error:r2@gpu03", hosts=BASE_HOSTS)
    final = rollout(e, "gpu03")
    assert final.outcome == "DONE", final.message
    calls = mutating(e.fleet, "gpu03")
    downs = [c.body["services"] for c in calls if c.is_compose_down]
    assert ["model-sg-glm53-w4afp8-tp4-r2"] in downs and ["model-sg-glm53-w4afp8-tp4-r1"] not in downs
    # r2 starts again only after r1 serves: r1's cold start (1200 simulated s here) from the apply
    [apply] = [c for c in calls if c.is_compose_up and "model-sg-glm53-w4afp8-tp4-r1" in c.body["services"]]
    [again] = [c for c in calls if c.is_compose_up and c.body["services"] == ["model-sg-glm53-w4afp8-tp4-r2"]]
    assert again.at - apply.at >= 1200 * 0.9
    on_w4afp8(e, "gpu03")
    assert e.fleet.check_invariants() == []


@pytest.fixture
def cli(tmp_path):
    """`orchestrate` in its own process against a simulated gpu02 and the three base hosts."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from orchestrator_sim import SimConfig, SimFleet

    speed = "3000"
    fleet = SimFleet(SimConfig(speed=float(speed), cold_start_s=1200, hosts=("gpu02", *BASE_HOSTS)))
    fleet.__enter__()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env.update(fleet.env_for_orchestrator(tmp_path / "inventory.yaml"))
    env.update({"ORCHESTRATOR_STATE_DIR": str(tmp_path / "state"), "ORCHESTRATOR_TIME_SCALE": speed,
                "ORCHESTRATOR_POLL_INTERVAL": "10"})
    root = Path(__file__).resolve().parents[2]

    def run(*args: str):
        return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], env=env, cwd=root,
                              capture_output=True, text=True, timeout=600)

    run.fleet = fleet  # type: ignore[attr-defined]
    yield run
    fleet.__exit__(None, None, None)


def test_the_fleet_command_refuses_before_gpu02_then_runs_every_host(cli):
    """What an on-call engineer types: the fleet refused (exit 5, one line naming gpu02 and the
    override), gpu02's rollout, then the fleet: every base host DONE, one line at the end."""
    import json

    fleet_cmd = ["rollout", "--hosts", "gpu03,gpu04,gpu23", "--tag", BASE_TARGET_TAG, "--yes", "--soak", "0"]
    r = cli(*fleet_cmd)
    assert r.returncode == 5, r.stderr
    assert "prerequisite not met: gpu02" in r.stderr and "--override-prerequisite gpu02" in r.stderr
    assert "Traceback" not in r.stderr and [c for c in cli.fleet.calls if c.is_compose_down] == []

    r = cli("rollout", "gpu02", "--tag", "v0.0.300", "--yes", "--soak", "0")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]

    r = cli(*fleet_cmd, "--json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    events = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert [e["host"] for e in events if e["event"] == "fleet_host"] == list(BASE_HOSTS)
    assert [e["outcome"] for e in events if e["event"] == "summary"] == ["DONE"] * 3
    [done] = [e for e in events if e["event"] == "fleet_summary"]
    assert done["outcome"] == "DONE" and done["not_started"] == []
    assert cli.fleet.check_invariants() == []

    r = cli("plan", "--hosts", "gpu03,gpu04,gpu23", "--tag", BASE_TARGET_TAG)
    assert r.returncode == 0 and "fleet gpu03 -> gpu04 -> gpu23" in r.stdout


def test_demo_base_tier_stops_the_fleet_at_the_host_whose_gate_failed(tmp_path):
    """`orchestrate demo --base-tier`: gpu02, then the fleet; a failing perception check on gpu04
    rolls gpu04 back, gpu23 is not started, the exit code is gpu04's (3, rolled back)."""
    import subprocess
    import sys
    from pathlib import Path

    r = subprocess.run([sys.executable, "-m", "orchestrator.cli", "demo", "--base-tier", "--speed", "3000",
                        "--fault", "perception-fails@gpu04", "--state-dir", str(tmp_path / "state")],
                       cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=600)
    assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-2000:]
    assert "fleet stopped at gpu04" in r.stdout and "not started: gpu23" in r.stdout
    assert "DONE gpu03" in r.stdout


def test_a_rollback_of_a_base_host_already_on_fp8_is_refused_without_change(e2e_factory):
    """After a rolled-back rollout, `orchestrate rollback gpu03` would only drain a healthy FP8 host:
    refused (exit 5), only read-only calls sent (admission.refuse_nothing_to_roll_back)."""
    from orchestrator.service.admission import new_rollback

    e = e2e_factory("perception-fails@gpu03", hosts=BASE_HOSTS)
    assert rollout(e, "gpu03").outcome == "ROLLED_BACK"
    mark = last_seq(e.fleet)
    with pytest.raises(Refused, match="already runs the previous configuration"):
        asyncio.run(new_rollback(e.session, "gpu03", "all", None, None, None))
    assert mutating(e.fleet, "gpu03", mark) == []
    on_fp8_and_registered(e, "gpu03")


def test_a_rollback_while_another_base_host_is_mid_run_is_refused(e2e_factory):
    """gpu03 DONE; gpu04's rollout is interrupted mid-switch (its run has not ended): rolling gpu03
    back would take a second base host out, so it is refused (admission.refuse_tier_busy)."""
    from orchestrator.service.admission import new_rollback

    e = e2e_factory(hosts=BASE_HOSTS)
    assert rollout(e, "gpu03").outcome == "DONE"
    busy = e.session.journal.create_run(host="gpu04", runbook=RUNBOOK, tag=BASE_TARGET_TAG, kind="rollout",
                                        state="switch.cold-start-r1", context={})
    mark = last_seq(e.fleet)
    with pytest.raises(Refused, match=f"gpu04 has run {busy.run_id}"):
        asyncio.run(new_rollback(e.session, "gpu03", "all", None, None, None))
    assert [c for c in e.fleet.calls if c.seq > mark and c.host == "gpu03"] == []
    on_w4afp8(e, "gpu03")


def test_two_terminals_never_take_two_base_hosts_out(e2e_factory):
    """gpu03's rollout runs (a second process's journal session); gpu04's rollout, started while
    gpu03 cold-starts, is refused at admission (the tier's lease): nothing sent to gpu04 at all."""
    import threading

    from orchestrator.hosts.clients.retry import RetryPolicy
    from orchestrator.service.admission import new_rollout
    from orchestrator.service.demo import demo_settings
    from orchestrator.service.runner import execute
    from orchestrator.service.session import Session

    e = e2e_factory(hosts=BASE_HOSTS)
    other = Session.open(demo_settings(e.fleet, e.state_dir), clock=e.session.clock,
                         retry=RetryPolicy(deadline_s=900, busy_wait_s=5))
    progress = RecordingProgress()
    results = {}

    def gpu03():
        run, rb, table = new_rollout(other, "gpu03", BASE_TARGET_TAG, RUNBOOK)
        journal_overrides(other.journal, run, ["gpu02"], "test")
        results["gpu03"] = asyncio.run(execute(other, run, rb, table, progress=progress, yes=True, soak=0.0))

    t = threading.Thread(target=gpu03, daemon=True)
    t.start()
    def in_its_cold_start() -> bool:
        assert t.is_alive(), f"gpu03 ended before its cold start: {results}"
        return any(ev[0] == "step_started" and ev[1].get("state") == "switch.cold-start-r1" for ev in progress.events)

    wait_until(in_its_cold_start, "gpu03 to reach its cold start")
    # admission (orchestrator/service/admission.py): gpu03's run holds the tier, so gpu04's is not even created
    with pytest.raises(Refused, match="one host of the tier"):
        rollout(e, "gpu04")
    t.join(120)
    other.close()
    assert e.session.journal.list_runs("gpu04") == []
    assert [c for c in e.fleet.calls if c.host == "gpu04"] == []
    assert results["gpu03"].outcome == "DONE"
    assert e.fleet.check_invariants() == []
