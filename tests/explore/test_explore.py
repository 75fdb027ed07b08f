"""The seeded schedule explorer (orchestrator_sim/explore.py, docs/explorer.md) on a fixed, bounded
budget: the known-hole schedules, a fixed set of seeds and a deterministic subset of the crash
sweep, two at a time (the module takes about 3 minutes on 2 cores). `make explore SEEDS=N` runs
more seeds and the whole sweep (every journal write, every mutating call in flight).

Each schedule runs the real CLI in subprocesses against a fresh simulator and is judged on the
simulator's own record: one replica ready at every moment (I1), no ready new engine torn down
without a failed gate on it or an operator asking (I2), no mutating call repeated (I3), every up
after a checked dry run and the other call rules (I4), every command ends.
"""

from __future__ import annotations

import collections
import concurrent.futures
import random
from pathlib import Path

import pytest

from orchestrator_sim import explore
from orchestrator_sim.faults import FAULTS

pytestmark = pytest.mark.e2e

CI_HOLES = ["rerun-after-done", "inflight-r2-up", "kill-after-r2-up-intent", "abort-r1-cold-start",
            "rollback-typo-after-done"]
CI_SEEDS = [0, 5, 7, 8, 10, 11]  # faults, crashes, operator actions (see test_ci_seeds_cover_every_kind)
CI_WRITES = [8, 30, 60, 90]  # spread over the ~96 journal writes of an uninterrupted rollout (make explore: all)
CI_INFLIGHT = [1, 6, 10, 12, 15]  # of its 15 mutating calls: the first down, both perception-check ups (6, 12), the reconcile up

#: Violations the explorer found and that are not fixed yet (xfail, with the diagnosis). Empty: the
#: reconcile-up-in-flight finding (a one-shot restarted in place keeps its ID) is fixed in settle_up.
KNOWN: dict[str, str] = {}


def _labels() -> list[str]:
    return ([f"hole:{h}" for h in CI_HOLES] + [f"seed:{s}" for s in CI_SEEDS]
            + [f"after:{k}" for k in CI_WRITES] + [f"inflight:{k}" for k in CI_INFLIGHT])


def _job(label: str, workroot: str, base: dict | None) -> explore.Result:
    kind, _, arg = label.partition(":")
    if base is not None:  # the uninterrupted run without faults is the baseline: do not run it again
        explore._REFERENCES.setdefault(((), True), base)
    if kind == "hole":
        return explore.run_hole(arg, Path(workroot))
    if kind == "seed":
        return explore.run_seed(int(arg), Path(workroot))
    assert base is not None
    return explore.sweep_point(kind, int(arg), base, Path(workroot))


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, explore.Result]:
    workroot = tmp_path_factory.mktemp("explore")
    base = explore.baseline(workroot)
    out: dict[str, explore.Result] = {}
    with concurrent.futures.ProcessPoolExecutor(max_workers=2) as pool:
        futs = {label: pool.submit(_job, label, str(workroot), base) for label in _labels()}
        for label, f in futs.items():
            out[label] = f.result()
    summary = explore.write_report(list(out.values()), workroot / "report.md", "explorer (CI budget)")
    print(f"\nexplorer: {summary['schedules']} schedules, by kind {summary['by_kind']}, "
          f"{len(summary['violating'])} violating; report {workroot / 'report.md'}")
    return out


def test_draw_is_deterministic_and_covers_every_fault_and_action() -> None:
    schedules = [explore.draw(s) for s in range(400)]
    assert [s.describe() for s in schedules] == [explore.draw(s).describe() for s in range(400)]
    kinds = collections.Counter(k for s in schedules for k in s.kinds)
    assert {"faults", "crashes", "operator"} <= set(kinds)
    drawn = {f.partition(":")[0] for s in schedules for f in s.faults}
    assert drawn == {n for n, f in FAULTS.items() if f.scope != "base" and f.drawn}  # gpu02's faults (not those aimed at one step)
    actions = {a.kind for s in schedules for a in s.during + s.after}
    assert actions == {"abort", "approve", "second-runner", "rerun", "rollback", "rollback-typo", "resume", "retry"}
    assert {s.crash[0] for s in schedules if s.crash} == {"after", "inflight"}


def test_ci_seeds_cover_every_kind() -> None:
    kinds = {k for s in CI_SEEDS for k in explore.draw(s).kinds}
    assert {"faults", "crashes", "operator"} <= kinds


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


@pytest.mark.parametrize("label", _labels())
def test_schedule_keeps_the_promise(results, label) -> None:
    r = results[label]
    if label in KNOWN:
        if r.violations:
            pytest.xfail(f"known: {KNOWN[label]} ({'; '.join(r.violations)})")
    assert r.violations == [], f"{r.schedule}\nreproduce: {r.repro}\n" + "\n".join(r.violations + r.commands)


def test_budget_reports_counts_per_kind(results) -> None:
    summary = explore.summarize(list(results.values()))
    assert summary["schedules"] == len(_labels())
    assert {"faults", "crashes", "operator"} <= set(summary["by_kind"])
