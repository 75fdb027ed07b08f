"""Judging a schedule of the explorer (orchestrator_sim/explore/) on the simulator's own record
(I1-I4, live) and the journal (H, human.py), and running seeds, holes and crash-sweep points."""

from __future__ import annotations

import collections
import dataclasses
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator_sim.compose_manager.repo import TARGET_FILE
from orchestrator_sim.explore.common import CMD_TIMEOUT_S, GATE_FAULTS, TAG, _effective, _mutating_key, end_state
from orchestrator_sim.explore.run import Execution
from orchestrator_sim.explore.schedule import HOLES, Schedule, draw
from orchestrator_sim.faults import ENGINE_FAULTS


@dataclass
class Result:
    seed: int | None
    schedule: str
    kinds: list[str]
    violations: list[str]
    seconds: float
    commands: list[str]
    repro: str
    first_outcome: str | None = None
    label: str = ""
    #: for a violating schedule: what its runs journaled (every transition not `ok`) and each
    #: command's last lines, so that a violation seen once (a CI run under load) can be diagnosed
    evidence: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def judge(ex: Execution, reference: dict[str, Any] | None = None) -> list[str]:
    out: list[str] = []
    calls = ex.fleet.calls
    # I4 (and I1 through the timeline: serving means ready)
    found = ex.fleet.check_invariants()
    if ex.env_before is not None:  # the env map changed mid-history: a call is judged by either map
        before = set(ex.fleet.check_invariants(dashboard_env=ex.env_before))
        found = [v for v in found if "env map" not in v or v in before]
    for v in found:
        label = ("I1 serving: " if "not serving" in v else "I1 capacity: " if "base hosts served" in v
                 else "I4 rules: ")
        out.append(label + v)
    # I2: a ready engine of the new definition stopped without a failed gate on it or an operator's ask
    faults = [f.partition(":") for f in ex.s.faults]
    for e in ex.engines.events():
        if e.ready or e.file != TARGET_FILE:
            continue
        if any(n in ENGINE_FAULTS and arg == e.slot for n, _, arg in faults) or any(n in GATE_FAULTS for n, _, _ in faults):
            continue
        asked = [who for t, who, slot, cmd in ex.permissions
                 if t <= e.at and slot in ("all", e.slot) and (cmd is None or cmd.rc in (0, None))]
        if asked:
            continue
        by = (f"call #{e.call_seq} ({e.call_action} {e.call_file} {','.join(e.call_services or ())})"
              if e.call_seq else "no compose call")
        out.append(f"I2 teardown: the ready new {e.slot} ({e.container} {e.container_id}) was stopped at t={e.at:.0f}s by "
                   f"{by}, with no failed gate on {e.slot} and no operator asking")
    # I3: consecutive accepted compose calls with the same request (per host)
    prev: dict[str, Any] = {}
    for c in sorted((c for c in calls if _effective(c)), key=lambda c: c.seq):
        p = prev.get(c.host or "")
        if p is not None and _mutating_key(p) == _mutating_key(c) and not _operator_started_over(ex, p, c):
            out.append(f"I3 duplicate: call #{c.seq} repeats call #{p.seq} ({c.host + ' ' if c.host else ''}{c.path} "
                       f"{_mutating_key(c)[2]} {','.join(_mutating_key(c)[3])}) with nothing accepted in between")
        prev[c.host or ""] = c
    # I3 against an uninterrupted run of the same faults (crash schedules)
    if reference is not None:
        first = collections.Counter(_mutating_key(c) for c in calls if c.is_mutating and c.seq <= ex.first_run_end_seq
                                    and c.status == 200)
        extra = {k: n for k, n in first.items() if n > reference["mutating"].get(k, 0)}
        for k, n in extra.items():
            out.append(f"I3 duplicate: {k[0]} {k[2]} {','.join(k[3])} sent {n}x, {reference['mutating'].get(k, 0)}x in the "
                       f"uninterrupted run")
        if ex.first_outcome != reference["outcome"]:
            out.append(f"end: the run ended {ex.first_outcome} after the crash, {reference['outcome']} uninterrupted")
        elif ex.first_end_state is not None and ex.first_end_state != reference["end"]:
            diff = {k: (ex.first_end_state.get(k), reference["end"].get(k))
                    for k in set(ex.first_end_state) | set(reference["end"]) if ex.first_end_state.get(k) != reference["end"].get(k)}
            out.append(f"end: the end state differs from the uninterrupted run's: {diff}")
    # a wrong explicit rollback target (a file the tag holds, the wrong one) is refused before
    # anything is sent but dry runs; after a DONE rollout, with exit 2 (the operator's target is wrong)
    for c in ex.commands:
        if c.label != "rollback-wrong" or c.rc == -9 or c.timed_out:
            continue
        sent = [k for k in calls if k.is_mutating and k.host in ("", "gpu02") and c.sim_start <= k.at <= (c.sim_end or k.at)]
        if sent:
            out.append(f"target: `orchestrate {' '.join(c.argv)}` sent {len(sent)} call(s) that change the host "
                       f"(first: call #{sent[0].seq} {sent[0].path} {','.join((sent[0].body or {}).get('services') or ())})")
        if ex.first_outcome == "DONE" and c.rc != 2:
            out.append(f"target: `orchestrate {' '.join(c.argv)}` after a DONE rollout exited {c.rc}, not 2: {c.tail[-300:]!r}")
    # H: humans stay in the loop (orchestrator_sim/explore/human.py)
    from orchestrator_sim.explore.human import check_humans

    out += check_humans(_journals(ex), ex.commands)
    # liveness
    for c in ex.commands:
        if c.timed_out:
            out.append(f"live: `orchestrate {' '.join(c.argv)}` did not end within {CMD_TIMEOUT_S:.0f}s")
        elif c.rc == 1:
            out.append(f"live: `orchestrate {' '.join(c.argv)}` exited 1 (unexpected error): {c.tail[-300:]!r}")
    return out


def _command_at(ex: Execution, t: float) -> Any:
    """The run command (not an approve/abort) that was running at simulated time `t`, if one."""
    for c in ex.commands:
        if c.argv and c.argv[0] in ("rollout", "resume", "rollback") and c.sim_start <= t <= (c.sim_end or float("inf")):
            return c
    return None


def _operator_started_over(ex: Execution, p: Any, c: Any) -> bool:
    """Call `c` repeats `p`, but the operator started over: `p`'s command ended on its own (not
    killed, not Ctrl-C'd) and `c` came from a later `rollout` the operator ran (a new run, e.g. the
    fleet again after a gpu03 run ABORTED because model-downloader failed: its one-shot runs again).
    A run that repeats its own call (a resume, a takeover) is still judged."""
    a, b = _command_at(ex, p.at), _command_at(ex, c.at)
    return (a is not None and b is not None and a is not b and b.argv[0] == "rollout" and a.rc not in (None, -9, 130)
            and not a.timed_out and a.sim_end is not None and a.sim_end <= b.sim_start)


_REFERENCES: dict[Any, dict[str, Any]] = {}


def reference_for(faults: list[str], yes: bool, seed: int, workroot: Path, like: Schedule | None = None) -> dict[str, Any]:
    """An uninterrupted first rollout with the same faults (cached per process); `like`: take its
    form (fast), aimed faults and log length too."""
    extra = (like.fast, tuple(like.aimed), like.log_lines) if like is not None else (False, (), None)
    key: Any = (tuple(faults), yes) if extra == (False, (), None) else (tuple(faults), yes, extra)
    if key not in _REFERENCES:
        s = Schedule(seed=seed, faults=list(faults), yes=True, fast=extra[0], aimed=list(extra[1]), log_lines=extra[2])
        d = Path(tempfile.mkdtemp(prefix="ref-", dir=workroot))
        ex = Execution(s, d)
        ex.execute()
        _REFERENCES[key] = {
            "mutating": collections.Counter(_mutating_key(c) for c in ex.fleet.calls if c.is_mutating and c.status == 200),
            "outcome": ex.first_outcome,
            "end": ex.final_state,
        }
    return _REFERENCES[key]


def repro_line(seed: int) -> str:
    return f"make explore SEEDS=1 SEED={seed}   # or: python -m orchestrator_sim.explore --seed {seed}"


def run_schedule(s: Schedule, workroot: Path | None = None, *, verbose: bool = False, repro: str = "",
                 label: str = "", reference: dict[str, Any] | None = None) -> Result:
    """Run one schedule on a fresh simulator and judge it. Crash schedules (without an abort or a
    second runner) are also compared with an uninterrupted run of the same faults."""
    workroot = Path(workroot or tempfile.mkdtemp(prefix="explore-"))
    workroot.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix=f"{label or 'seed' + str(s.seed)}-", dir=workroot))
    t0 = time.monotonic()
    if verbose:
        print(f"{label or 'seed ' + str(s.seed)}: {s.describe()}", flush=True)
    ex = Execution(s, d, verbose=verbose)
    ex.execute()
    if verbose:
        for e in ex.engines.events():
            print(f"  [{e.at:7.0f}s] {e.slot} {e.container} {e.file.rsplit('/', 1)[-1]} {e.reason}"
                  + (f" (by call #{e.call_seq} {e.call_action})" if e.call_seq else ""))
    if s.door == "cli" and s.crash is not None and not [a for a in s.during if a.kind in ("abort", "second-runner")]:
        ex.first_end_state = ex.state_after_first
        if reference is None:
            reference = reference_for(s.faults, s.yes, s.seed, workroot, like=s)
    else:
        reference = None
    violations = judge(ex, reference)
    evidence = _evidence(ex) if violations else []
    return Result(None if label else s.seed, s.describe(), s.kinds, violations, round(time.monotonic() - t0, 1),
                  [f"{c.label}: orchestrate {' '.join(c.argv)} -> {c.rc}{' ' + c.note if c.note else ''}" for c in ex.commands],
                  repro or repro_line(s.seed), ex.first_outcome, label=label, evidence=evidence)


def _journals(ex: Execution) -> list[Path]:
    """The schedule's journal, and the second state directory's of the `journals` door."""
    return [ex.dir / "journal.sqlite3", ex.dir / "other-journal" / "journal.sqlite3"]


def _evidence(ex: Execution) -> list[str]:
    """The journal's transitions that were not `ok` (a failed gate, a halt, a rollback, with their
    notes) of every run in either journal, and the last lines of each command's output."""
    out: list[str] = []
    for db in _journals(ex):
        if not db.exists():
            continue
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
            try:
                rows = con.execute("SELECT t.run_id, r.kind, t.seq, t.from_state, t.event, t.to_state, t.note "
                                   "FROM transitions t JOIN runs r USING (run_id) "
                                   "WHERE t.event != 'ok' ORDER BY r.run_seq, t.seq").fetchall()
            finally:
                con.close()
        except sqlite3.Error as exc:
            out.append(f"{db.name}: unreadable ({exc})")
            continue
        out += [f"{db.parent.name}/{run[:8]} {kind} #{seq} {a} --{ev}--> {b}: {(note or '')[:300]}"
                for run, kind, seq, a, ev, b, note in rows]
    for c in ex.commands:
        lines = [ln for ln in c.tail.splitlines() if not ln.startswith("INFO:")]  # not uvicorn's access lines
        out.append(f"{c.label} `orchestrate {' '.join(c.argv)}` -> {c.rc}: " + " | ".join(lines[-6:])[-600:])
    return out


def run_seed(seed: int, workroot: Path | None = None, *, verbose: bool = False, fast: bool = False) -> Result:
    return run_schedule(draw(seed, fast), workroot, verbose=verbose,
                        repro=repro_line(seed) + (" --fast" if fast else ""))


def run_hole(name: str, workroot: Path | None = None, *, verbose: bool = False) -> Result:
    return run_schedule(HOLES[name], workroot, verbose=verbose, label=f"hole:{name}",
                        repro=f"python -m orchestrator_sim.explore --hole {name}")


# ----------------------------------------------------------------------------- crash sweeps
def baseline(workroot: Path) -> dict[str, Any]:
    """An uninterrupted rollout with every journal write logged."""
    d = Path(tempfile.mkdtemp(prefix="baseline-", dir=workroot))
    log = d / "writes.log"
    ex = Execution(Schedule(seed=0), d)
    with ex.fleet:
        env = ex.env(ORCHESTRATOR_TEST_KILL_AFTER="0", ORCHESTRATOR_TEST_WRITE_LOG=str(log))
        proc = ex.launch(["rollout", "gpu02", "--tag", TAG, "--yes"], env)
        out, _ = proc.communicate(timeout=CMD_TIMEOUT_S)
        if proc.returncode != 0:
            raise RuntimeError(f"the uninterrupted rollout failed ({proc.returncode}): {(out or '')[-2000:]}")
        calls = ex.fleet.calls
        return {
            "writes": [ln.split() for ln in log.read_text().splitlines()],
            "mutating": collections.Counter(_mutating_key(c) for c in calls if c.is_mutating and c.status == 200),
            "mutating_calls": [_mutating_key(c) for c in calls if c.is_mutating],
            "end": end_state(ex.fleet),
            "outcome": "DONE",
        }


def sweep_point(kind: str, point: int, base: dict[str, Any], workroot: Path, *, verbose: bool = False) -> Result:
    """Kill the rollout after journal write `point` (kind "after") or with mutating call `point`
    in flight (kind "inflight"), resume, and compare with the uninterrupted run."""
    flag = "--sweep writes" if kind == "after" else "--sweep inflight"
    r = run_schedule(Schedule(seed=0, crash=(kind, point)), workroot, verbose=verbose, label=f"{kind}:{point}",
                     repro=f"python -m orchestrator_sim.explore {flag} --points {point}", reference=base)
    if not any("-> -9" in c for c in r.commands):
        r.violations.append(f"sweep: the rollout was not killed at {kind} point {point}")
    return r
