"""The seeded schedule explorer (orchestrator_sim/explore/, docs/explorer.md) on a fixed, bounded
budget: a few known-hole schedules, a fixed set of seeds in their fast (CI) form covering every
door (explore/doors.py) and every kind, and a deterministic subset of the crash sweep.
`EXPLORE_FULL=1` (`make explore-ci`) runs the 100+ seed set instead of the fixed set;
`make explore SEEDS=N` runs more seeds in their full form and the whole sweep.

Each schedule runs the real CLI in subprocesses against a fresh simulator and is judged on the
simulator's own record: one replica ready at every moment (I1), no ready new engine torn down
without a failed gate on it or an operator asking (I2), no mutating call repeated (I3), every up
after a checked dry run and the other call rules (I4), every command ends.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import fcntl
import json
import os
import random
from pathlib import Path

import pytest

from orchestrator_sim import explore
from orchestrator_sim.explore.doors import aim, doors_available, sim_field
from orchestrator_sim.explore.judge import _REFERENCES
from orchestrator_sim.faults import FAULTS

pytestmark = pytest.mark.e2e

CI_HOLES = ["inflight-r2-up", "abort-r1-cold-start", "rollback-typo-after-done",
            # a wrong explicit rollback target refused with nothing sent; a lock after every stop waited out
            "rollback-wrong-after-done", "lock-after-down-rollback-all",
            # a sidecar's stop refused for the lock past timeouts.gone halts; `--retry` resends it there
            "sidecar-lock-then-retry",
            # invariant H: an adopted run and a person's resume without --yes wait for a human; the page
            # approves only the gate that waits (explore/human.py)
            "sigint-then-adopted", "ctrl-c-resume-without-yes", "page-approve-in-cold-start",
            # seed 136: a rollback by hand after a kill right after the perception check's down sent it again
            "serve-rollback-after-perception-stop",
            # seed 423: the fleet command again after a Ctrl-C resumes the host's interrupted run
            "fleet-again-after-ctrl-c"]
#: hole schedules with a product guard broken on purpose: the judge must see each (H1/H2)
CI_BROKEN = {"broken-adopted-keeps-yes": "H1 human", "broken-page-approves-any-gate": "H2 page"}
#: the fixed set `make test` runs (fast form): every door (test_ci_seeds_cover_every_door: two of
#: the base, stall, serve, page and journals doors, whose schedules vary most), every kind (faults,
#: crashes, operator, aimed, short logs); 53: an adopted run whose first read of r2's 50-line log came
#: after its start rotated out; 181: a `resume --server` without --yes the human approves while it runs
FIXED_SEEDS = [0, 1, 2, 3, 4, 5, 6, 7, 9, 11, 14, 19, 20, 23, 25, 53, 84, 181]
#: the 100+ seed set, its own step (`make explore-ci`, EXPLORE_FULL=1): fast-form seeds 0-99 and 181
FULL_SEEDS = list(range(100)) + [181]
CI_SEEDS = FULL_SEEDS if os.environ.get("EXPLORE_FULL", "") not in ("", "0") else FIXED_SEEDS
CI_JOBS = 6  # schedules mostly wait (leases, cold starts, soaks, the human): 6 at a time keep 2 cores busy
CI_WRITES = [60]  # of the ~96 journal writes of an uninterrupted rollout (make explore: all)
CI_INFLIGHT = [12]  # of its 15 mutating calls: the second perception-check up

#: Violations the explorer found and that are not fixed yet (xfail, with the diagnosis). Empty: the
#: reconcile-up-in-flight finding (a one-shot restarted in place keeps its ID) is fixed in settle_up.
KNOWN: dict[str, str] = {}


def _labels() -> list[str]:
    return ([f"hole:{h}" for h in CI_HOLES] + [f"broken:{h}" for h in CI_BROKEN] + [f"seed:{s}" for s in CI_SEEDS]
            + [f"after:{k}" for k in CI_WRITES] + [f"inflight:{k}" for k in CI_INFLIGHT])


#: a schedule's usual real seconds by door (fast form, measured on the CI set), for the order of the pool
DOOR_COST = {"serve": 11, "base": 9, "stall": 8, "clock": 8, "journals": 5, "page": 6, "env": 6, "preview": 3, "cli": 4}


def _cost(label: str) -> float:
    kind, _, arg = label.partition(":")
    if kind != "seed":
        return 10.0  # holes and sweep points: a kill and a resume, a reference run
    s = explore.draw(int(arg), True)
    return DOOR_COST.get(s.door, 5) + (4 if s.crash is not None else 0)


def _job(label: str, workroot: str, base: dict | None) -> explore.Result:
    kind, _, arg = label.partition(":")
    if base is not None:  # the uninterrupted run without faults is the baseline: do not run it again
        _REFERENCES.setdefault(((), True), base)
    if kind in ("hole", "broken"):
        return explore.run_hole(arg, Path(workroot))
    if kind == "seed":
        return explore.run_seed(int(arg), Path(workroot), fast=True)
    assert base is not None
    return explore.sweep_point(kind, int(arg), base, Path(workroot))


def _run_all(workroot: Path) -> dict[str, explore.Result]:
    base = explore.baseline(workroot)
    out: dict[str, explore.Result] = {}
    with concurrent.futures.ProcessPoolExecutor(max_workers=CI_JOBS) as pool:
        # the longest first (serve, base, stall, crash schedules): the last to end are short ones,
        # so the set's wall time is not one long schedule started last
        futs = {label: pool.submit(_job, label, str(workroot), base) for label in sorted(_labels(), key=_cost, reverse=True)}
        for label, f in futs.items():
            out[label] = f.result()
    summary = explore.write_report(list(out.values()), workroot / "report.md", "explorer (CI budget)")
    print(f"\nexplorer: {summary['schedules']} schedules, by kind {summary['by_kind']}, "
          f"{len(summary['violating'])} violating; report {workroot / 'report.md'}")
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, explore.Result]:
    """The CI set, run once per test session: under xdist every worker that gets one of these tests
    needs the results, and the first one to come runs the schedules while the others wait for its
    file (the lock-and-share recipe of pytest-xdist), so the schedules never run twice."""
    if "PYTEST_XDIST_WORKER" not in os.environ:  # no xdist (or -p no:xdist): this process runs them
        return _run_all(tmp_path_factory.mktemp("explore"))
    shared = tmp_path_factory.getbasetemp().parent
    with open(shared / "explore-ci.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = shared / "explore-ci.json"
        if done.exists():
            return {k: explore.Result(**v) for k, v in json.loads(done.read_text()).items()}
        out = _run_all(tmp_path_factory.mktemp("explore"))
        done.write_text(json.dumps({k: dataclasses.asdict(v) for k, v in out.items()}))
        return out


def test_draw_is_deterministic_and_covers_every_fault_and_action() -> None:
    schedules = [explore.draw(s) for s in range(600)]
    assert [s.describe() for s in schedules] == [explore.draw(s).describe() for s in range(600)]
    kinds = collections.Counter(k for s in schedules for k in s.kinds)
    assert {"faults", "crashes", "operator", "aimed"} <= set(kinds)
    cli = [s for s in schedules if s.door == "cli"]
    drawn = {f.partition(":")[0] for s in cli for f in s.faults}
    assert drawn == {n for n, f in FAULTS.items() if f.scope != "base" and f.drawn}  # gpu02's faults (not those aimed at one step)
    base = {f.partition(":")[0].partition("@")[0] for s in schedules if s.door == "base" for f in s.faults}
    assert base == {n for n, f in FAULTS.items() if f.scope == "base"}
    assert {d for s in schedules for d in [s.door]} == set(doors_available())
    assert {a[0] for s in schedules for a in s.aimed} == {"busy-409", "server-500"}
    assert {s.door_args["step"] for s in schedules if s.door == "clock"} == {-3600, 3600}
    assert {s.door_args["variant"] for s in schedules if s.door == "stall"} == {"gpu02", "base-rollout", "base-rollback"}
    assert {s.door_args["adopt"] for s in schedules if s.door == "serve"} == {True, False}
    schedules = cli
    actions = {a.kind for s in schedules for a in s.during + s.after}
    assert actions == {"abort", "approve", "second-runner", "rerun", "rollback", "rollback-typo", "rollback-wrong", "resume",
                       "retry"}
    assert {s.crash[0] for s in schedules if s.crash} == {"after", "inflight"}


@pytest.mark.parametrize("seeds", [FIXED_SEEDS, FULL_SEEDS], ids=["fixed", "full"])
def test_ci_seeds_cover_every_kind(seeds) -> None:
    kinds = {k for s in seeds for k in explore.draw(s).kinds}
    assert {"faults", "crashes", "operator", "aimed"} <= kinds


@pytest.mark.parametrize("seeds", [FIXED_SEEDS, FULL_SEEDS], ids=["fixed", "full"])
def test_ci_seeds_cover_every_door(seeds) -> None:
    assert {explore.draw(s).door for s in seeds} >= set(doors_available()) - {"preview"}


def test_a_door_needing_a_simulator_knob_is_drawn_only_when_the_simulator_has_it() -> None:
    """Short logs and the dry run that really recreates are drawn only when the simulator exposes
    them (a SimConfig field, a fault in the table): the explorer runs before and after they land."""
    schedules = [explore.draw(s) for s in range(600)]
    assert any(s.log_lines for s in schedules) == (sim_field("log_lines") is not None)
    assert any(s.door == "preview" for s in schedules) == ("dry-run-recreates" in FAULTS)


def test_an_aimed_fault_hits_exactly_the_kth_request() -> None:
    from orchestrator_sim import SimConfig, SimFleet

    fleet = SimFleet(SimConfig(speed=3000))
    aim(fleet, [("busy-409", "gpu02", 3, 2)])
    assert [fleet.hosts["gpu02"].faults.take("busy-409") for _ in range(6)] == [False, False, True, True, False, False]
    assert fleet.hosts["gpu02"].faults.take("server-500") is False


def test_the_clock_hook_steps_the_orchestrators_wall_clock() -> None:
    """ORCHESTRATOR_TEST_CLOCK_OFFSET_S (explore/crash.py only) moves the journal's and the
    runner's `now` by the offset; without it the clock is untouched."""
    import os
    import subprocess
    import sys

    code = ("import sys; sys.argv=['x']\n"
            "from orchestrator_sim.explore.doors import clock_offset_hook\n"
            "clock_offset_hook()\n"
            "import orchestrator.journal.sql as s, orchestrator.service.runner as r, datetime as d\n"
            "n = d.datetime.now(d.timezone.utc)\n"
            "print(round((s.datetime.now(d.timezone.utc) - n).total_seconds()), round((r.datetime.now(d.timezone.utc) - n).total_seconds()))")
    for offset, want in (("-3600", "-3600 -3600"), ("", "0 0")):
        env = {**os.environ, "ORCHESTRATOR_TEST_CLOCK_OFFSET_S": offset}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert out.stdout.split() == want.split(), out.stderr[-1000:]


def test_the_judge_sees_a_teardown_nobody_asked_for(tmp_path) -> None:
    """A rogue scoped down of the serving new r2 after a finished rollout (not in the schedule):
    I2 must name it; stopping r1 too must show as an outage (I1)."""
    import httpx

    ex = explore.Execution(explore.Schedule(seed=random.randrange(1000)), tmp_path)
    with ex.fleet:
        assert ex.run_cmd("rollout", ["rollout", "gpu02", "--tag", explore.TAG, "--yes"]).rc == 0
        up = next(c for c in ex.fleet.calls if c.is_compose_up and not c.dry_run)
        headers = {"Authorization": f"Bearer {ex.fleet.tokens.compose_manager}"}
        for svc in ("model-sg-glm53-w4afp8-tp4-r2", "model-sg-glm53-w4afp8-tp4-r1"):
            body = {**up.body, "services": [svc]}
            with httpx.stream("POST", ex.fleet.urls.compose_manager + "/compose/down", json=body, headers=headers,
                              timeout=60) as r:
                assert r.status_code == 200
                for _ in r.iter_lines():
                    pass
    found = explore.judge(ex)
    assert any(v.startswith("I2 teardown: the ready new r2") for v in found), found
    assert any(v.startswith("I1 serving") for v in found), found


@pytest.mark.parametrize("label", [x for x in _labels() if not x.startswith("broken:")])
def test_schedule_keeps_the_promise(results, label) -> None:
    r = results[label]
    if label in KNOWN:
        if r.violations:
            pytest.xfail(f"known: {KNOWN[label]} ({'; '.join(r.violations)})")
    assert r.violations == [], f"{r.schedule}\nreproduce: {r.repro}\n" + "\n".join(r.violations + ["evidence:"] + r.evidence)


#: what each door's schedule must show in its commands: the door was really entered
DOOR_MARKS = {"base": "--hosts", "stall": "SIGSTOP at call", "serve": "serve: orchestrate serve",
              "page": "--server http://127.0.0.1:", "clock": "clock ", "journals": "(another journal)",
              "env": "rollout: orchestrate rollout gpu02", "preview": "--live"}


def test_the_doors_are_really_entered(results) -> None:
    """Every door is really entered by at least one CI seed (a stall at call k needs k calls)."""
    entered = collections.defaultdict(list)
    for s in CI_SEEDS:
        door = explore.draw(s).door
        if door in DOOR_MARKS:
            entered[door].append(any(DOOR_MARKS[door] in c for c in results[f"seed:{s}"].commands))
    assert {d for d, seen in entered.items() if any(seen)} == set(DOOR_MARKS) & set(doors_available()), dict(entered)


def test_budget_reports_counts_per_kind(results) -> None:
    summary = explore.summarize(list(results.values()))
    assert summary["schedules"] == len(_labels())
    assert {"faults", "crashes", "operator"} <= set(summary["by_kind"])


@pytest.mark.parametrize("name", list(CI_BROKEN))
def test_the_judge_sees_a_human_left_out(results, name) -> None:
    """With the product's guard broken on purpose (an adopted run passing its gates on the stored
    --yes; the server taking `*` from the run page), invariant H must name it; the same schedule
    without the break (sigint-then-adopted, page-approve-in-cold-start) keeps every invariant."""
    r = results[f"broken:{name}"]
    assert any(v.startswith(CI_BROKEN[name]) for v in r.violations), (r.violations, r.commands)
    # a violating schedule carries its evidence: each command's last lines (and the runs' transitions
    # that were not ok), so that a violation seen once under load can be diagnosed from CI's output
    assert any(e.startswith("serve `orchestrate serve") for e in r.evidence), r.evidence


def test_the_end_state_does_not_tell_a_restart_loops_two_phases_apart() -> None:
    """Seed 745: a container in a restart loop (not the orchestrator's) shows `running` or
    `restarting` depending on when the end state is read; a crashed-and-resumed run and the
    uninterrupted one left the same containers, so the judge must see them alike, and still tell a
    container gone or on another file apart."""
    from types import SimpleNamespace as NS

    def fleet(*cs: tuple[str, str, str]) -> object:
        return NS(host=NS(containers=lambda: [NS(service=s, file=f, state=st) for s, f, st in cs]))

    r2 = ("model-sg-glm53-w4afp8-tp4-r2", "new.yaml")
    assert explore.end_state(fleet((*r2, "running"))) == explore.end_state(fleet((*r2, "restarting")))
    assert explore.end_state(fleet((*r2, "running"))) != explore.end_state(fleet((*r2, "exited")))
    assert explore.end_state(fleet((*r2, "running"))) != explore.end_state(fleet((r2[0], "old.yaml", "running")))
