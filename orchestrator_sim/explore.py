"""A seeded schedule explorer (FoundationDB/Jepsen style) for the product's one promise:

    at every moment at least one replica serves, and nothing healthy is torn down unless a gate on
    that very replica failed or an operator asked for it.

For a seed it draws a schedule: simulator faults (from `FAULTS`, with their args), crash points
(SIGKILL the orchestrator right after journal write N, or while the k-th mutating compose call is
in flight) and operator actions (abort, approve, a second runner started concurrently; after the
run: re-run `rollout`, `rollback --replica all|r2|r1`, `rollback --to-file <typo>`, `resume RUN`,
`resume RUN --retry`). It runs the schedule against a fresh simulator on loopback, driving the real
CLI in subprocesses, and judges the simulator's own record over the whole history:

  I1 serving     at least one replica slot *ready* at every moment (the timeline means ready);
  I2 teardown    no ready engine of the new definition stopped unless a fault targeted a gate of that
                 replica or the operator asked (abort, rollback of that replica) before it stopped;
  I3 duplicate   no mutating call repeated: two consecutive accepted compose calls with the same
                 request; for crash schedules also: no request sent more often than in an
                 uninterrupted run of the same faults, and the same end state and outcome;
  I4 rules       `check_invariants` (every up after a checked dry run of the same request and env,
                 no orphan removal, env map whole, ...);
  live           every command ends (no hang).

    python -m orchestrator_sim.explore --seed 1234            # one seed, verbose
    python -m orchestrator_sim.explore --seeds 50 --jobs 2     # seeds 0..49
    python -m orchestrator_sim.explore --sweep writes|inflight|all [--points 1,5,9]
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import logging
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator_sim.compose_repo import TARGET_FILE
from orchestrator_sim.explore_entry import DoorMixin
from orchestrator_sim.faults import ENGINE_FAULTS, FAULTS

ROOT = Path(__file__).resolve().parents[1]
#: Where the CLI subprocesses run (their working directory comes first on sys.path). Point
#: ORCHESTRATOR_EXPLORE_SRC at a directory holding another `orchestrator/` (e.g. an older commit's,
#: from `git archive`) to explore that executor against this simulator.
CLI_CWD = Path(os.environ.get("ORCHESTRATOR_EXPLORE_SRC") or ROOT)
SPEED = 3000.0  # simulated seconds per real second (as tests/e2e)
COLD_START_S = 2400.0  # 0.8 s real: room for an operator action to land inside a cold start
LEASE_TTL = 1.5  # seconds; a killed runner's lease expires after this
CMD_TIMEOUT_S = 240.0
TAG = "v0.0.300"
PREVIOUS_TAG = "v0.0.290"
TYPO_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-Canray.yaml"
#: the faults a gpu02 schedule draws from: the base tier's (scope "base") never hit gpu02, so
#: drawing them would only dilute the schedules (and shift every seed's draw)
GPU02_FAULTS = frozenset(n for n, f in FAULTS.items() if f.scope != "base" and f.drawn)
#: faults whose gate fails on whichever replica is being moved (not tied to r1/r2)
GATE_FAULTS = frozenset({"peer-missing", "cache-miss", "dry-run-extra-recreate", "dry-run-extra-remove",
                         "dry-run-not-dry", "dry-run-recreates", "perception-fails"})
#: upper bound for a drawn kill point (an uninterrupted rollout makes ~this many journal writes)
MAX_WRITE = 96
MAX_MUTATING = 15  # r2: 8 (its collector recreate alone since docker/compose#11900), r1: 6, reconcile: 1


# ----------------------------------------------------------------------------- schedules
@dataclass
class Action:
    kind: str  # abort | approve | second-runner | rerun | rollback | rollback-typo | resume | retry
    arg: str = ""  # rollback: all|r1|r2
    #: in-run: ("mut", k, delay_s) k-th mutating call arrived, ("done", k, delay_s) it was answered,
    #: or ("t", seconds, 0) after the command started (real seconds)
    trigger: tuple[str, float, float] | None = None
    crash: tuple[str, int] | None = None  # follow-ups: ("after", N)

    def __str__(self) -> str:
        s = self.kind + (f"({self.arg})" if self.arg else "")
        if self.trigger:
            kind, a, d = self.trigger
            s += f"@{kind}{int(a)}+{d:.2f}s" if kind in ("mut", "done") else f"@{a:.1f}s"
        if self.crash:
            s += f"!kill-after-write-{self.crash[1]}"
        return s


@dataclass
class Schedule:
    seed: int
    faults: list[str] = field(default_factory=list)
    yes: bool = True
    crash: tuple[str, int] | None = None  # ("after", N) journal write, ("inflight", k) mutating call
    during: list[Action] = field(default_factory=list)  # operator actions while the first rollout runs
    after: list[Action] = field(default_factory=list)  # operator actions once it ended
    #: how the runs enter (explore_entry.py): "cli" is the gpu02 CLI schedule above
    door: str = "cli"
    door_args: dict[str, Any] = field(default_factory=dict)
    hosts: tuple[str, ...] = ("gpu02",)
    #: busy-409/server-500 aimed at one host's k-th eligible request: (name, host, k, count)
    aimed: list[tuple[str, str, int, int]] = field(default_factory=list)
    log_lines: int | None = None  # every engine keeps only its last N log lines (if the simulator can)
    fast: bool = False  # the CI form: shorter cold starts, base hosts without gpu02's run first
    #: product guards broken on purpose in every command (test-only, explore_human.BREAKS): a hole
    #: schedule showing the judge sees what the guard prevents
    breaks: tuple[str, ...] = ()

    @property
    def kinds(self) -> list[str]:
        out = [f"door:{self.door}"] if self.door != "cli" else []
        if self.aimed:
            out.append("aimed")
        if self.log_lines:
            out.append("short-logs")
        if self.faults:
            out.append("faults")
        if self.crash or any(a.crash for a in self.after):
            out.append("crashes")
        if self.during or self.after or not self.yes:
            out.append("operator")
        return out or ["plain"]

    def describe(self) -> str:
        parts = [f"faults=[{', '.join(self.faults)}]", "--yes" if self.yes else "approval by `approve`"]
        if self.door != "cli" or self.aimed or self.log_lines:
            from orchestrator_sim.explore_entry import describe_door

            parts.insert(0, describe_door(self))
        if self.fast:
            parts.append("fast")
        if self.crash:
            parts.append(f"kill {'after journal write' if self.crash[0] == 'after' else 'with mutating call in flight'} #{self.crash[1]}")
        if self.during:
            parts.append("during: " + ", ".join(map(str, self.during)))
        if self.after:
            parts.append("after: " + ", ".join(map(str, self.after)))
        return "; ".join(parts)


#: how often each door is drawn (explore_entry.DOORS; `preview` only when the simulator has
#: the dry-run-recreates fault)
DOOR_WEIGHTS = {"cli": 30, "base": 14, "stall": 10, "serve": 12, "page": 8, "clock": 8, "env": 8, "journals": 5,
                "preview": 5}


def draw(seed: int, fast: bool = False) -> Schedule:
    """The schedule of a seed (pure: the same seed always draws the same schedule; `fast`: the CI
    form of the same schedule, see `Execution`)."""
    from orchestrator_sim.explore_entry import doors_available, draw_door, draw_extras

    rng = random.Random(seed)
    doors = doors_available()
    door = rng.choices(doors, weights=[DOOR_WEIGHTS[d] for d in doors])[0]
    s = Schedule(seed=seed, door=door, fast=fast)
    if door != "cli":
        draw_door(rng, s)
        draw_extras(rng, s)
        return s
    _draw_cli(rng, s)
    draw_extras(rng, s)
    return s


def _draw_cli(rng: random.Random, s: Schedule) -> None:
    names = sorted(GPU02_FAULTS)
    n_faults = rng.choices([0, 1, 2], weights=[45, 45, 10])[0]
    for name in rng.sample(names, n_faults):
        arg = FAULTS[name].arg
        if arg == "replica":
            s.faults.append(f"{name}:{rng.choice(['r1', 'r2'])}")
        elif arg == "count":
            s.faults.append(f"{name}:{rng.randint(1, 3)}")
        else:
            s.faults.append(name)
    s.yes = rng.random() < 0.85
    r = rng.random()
    if r < 0.30:
        s.crash = ("after", rng.randint(1, MAX_WRITE))
    elif r < 0.45:
        s.crash = ("inflight", rng.randint(1, MAX_MUTATING))
    if not s.yes:
        s.during.append(Action("approve", trigger=("t", rng.uniform(0.5, 8.0), 0.0)))
    if rng.random() < 0.35:
        kind = rng.choices(["abort", "second-runner"], weights=[70, 30])[0]
        trig = (rng.choice(["mut", "done"]), float(rng.randint(1, MAX_MUTATING)), rng.choice([0.0, 0.0, rng.uniform(0.0, 0.6)]))
        s.during.append(Action(kind, trigger=trig))
    if rng.random() < 0.45:
        for _ in range(rng.choice([1, 1, 2])):
            kind = rng.choice(["rerun", "rollback", "rollback", "rollback-typo", "resume", "retry"])
            a = Action(kind)
            if kind == "rollback":
                a.arg = rng.choice(["all", "all", "r2", "r1"])
            if kind in ("rerun", "rollback") and rng.random() < 0.25:
                a.crash = ("after", rng.randint(1, 40))
            s.after.append(a)


#: The holes the executor was just changed to close, as fixed schedules (`--hole NAME`). The
#: uninterrupted rollout's mutating calls: 1 down old r2, 2 up new r2, 3 up relay, 4 down relay,
#: 5 up sidecars, 6 down r1, 7 up new r1, 8 up relay, 9 down relay, 10 up reconcile.
HOLES: dict[str, Schedule] = {
    "rerun-after-done": Schedule(seed=0, after=[Action("rerun")]),
    "inflight-r2-up": Schedule(seed=0, crash=("inflight", 2)),
    "inflight-r1-up": Schedule(seed=0, crash=("inflight", 7)),
    "kill-after-r2-up-intent": Schedule(seed=0, crash=("after", 14)),
    "abort-r1-cold-start": Schedule(seed=0, during=[Action("abort", trigger=("done", 7, 0.0))]),
    "abort-r2-cold-start": Schedule(seed=0, during=[Action("abort", trigger=("done", 2, 0.0))]),
    "rollback-typo-after-done": Schedule(seed=0, after=[Action("rollback-typo")]),
    "second-runner-mid-r1": Schedule(seed=0, during=[Action("second-runner", trigger=("done", 7, 0.0))]),
    "rollback-all-after-done": Schedule(seed=0, after=[Action("rollback", "all")]),
    "rollback-r1-after-done": Schedule(seed=0, after=[Action("rollback", "r1")]),
    "oom-r1-then-retry": Schedule(seed=0, faults=["oom:r1"], after=[Action("retry")]),
    "oom-r1-then-rollback-all": Schedule(seed=0, faults=["oom:r1"], after=[Action("rollback", "all")]),
    # issue 21's cases through the new doors (explore_entry.py)
    # (mutating call 7 is the up of the new r1: killed during r1's cold start, rolled back by hand)
    "serve-adopts-after-rollback": Schedule(seed=0, door="serve", door_args={"crash": ("killdone", 7), "rollback": True,
                                                                             "adopt": True}),
    "server-resume-after-rollback": Schedule(seed=0, door="serve", door_args={"crash": ("killdone", 7), "rollback": True,
                                                                              "adopt": False}),
    "sigint-then-adopted": Schedule(seed=0, door="serve", door_args={"crash": ("sigint", 40), "adopt": True}),
    "page-approve-in-cold-start": Schedule(seed=0, door="page", yes=False,
                                           door_args={"actions": [("page-approve", "done", 2)]}),
    "stall-rollback-gpu04": Schedule(seed=0, door="stall", hosts=("gpu02", "gpu03", "gpu04", "gpu23"),
                                     door_args={"variant": "base-rollback", "k": 3}),
    "clock-back-resume-after-rollback": Schedule(seed=0, door="clock", door_args={"kill": 60, "step": -3600,
                                                                                  "rollback": True, "when": "resume"}),
    "clock-back-rollback": Schedule(seed=0, door="clock", door_args={"kill": 60, "step": -3600, "rollback": True,
                                                                     "when": "rollback"}),
    "budget-changed-after-crash": Schedule(seed=0, door="env", door_args={
        "change": ("GLM53_HICACHE_RAM_BUDGET", "650GiB"), "kill": 60, "then": "resume"}),
    # the judge of invariant H against a product guard broken on purpose (explore_human.BREAKS):
    # these must show H1/H2 (tests/explore/test_explore_human.py); without the break they keep H
    "broken-adopted-keeps-yes": Schedule(seed=0, door="serve", breaks=("inherit-yes",),
                                         door_args={"crash": ("sigint", 40), "adopt": True}),
    "ctrl-c-resume-without-yes": Schedule(seed=0, door="serve", door_args={"crash": ("sigint", 40), "adopt": False,
                                                                          "resume_yes": False}),
    "broken-page-approves-any-gate": Schedule(seed=0, door="page", yes=False, breaks=("page-any-gate",),
                                              door_args={"actions": [("page-approve", "done", 2)]}),
    "two-journals-gpu02": Schedule(seed=0, door="journals", door_args={"trigger": ("done", 2), "host": "gpu02"}),
}


# ----------------------------------------------------------------------------- running
@dataclass
class Command:
    label: str
    argv: list[str]
    sim_start: float
    sim_end: float | None = None
    rc: int | None = None
    run_id: str | None = None
    tail: str = ""
    timed_out: bool = False
    note: str = ""
    wall_start: float = field(default_factory=time.time)  # the host's wall clock (invariant H)
    wall_end: float | None = None
    offset: float = 0.0  # the command's clock step (the clock door)
    kept_yes: bool = False  # it said it kept the run's own --yes (a resume)


def _mutating_key(c: Any) -> tuple[Any, ...]:
    b = c.body if isinstance(c.body, dict) else {}
    return (c.path, b.get("tag"), b.get("file"), tuple(b.get("services") or ()), getattr(c, "host", "") or "")


def _effective(c: Any) -> bool:
    return c.is_mutating and c.status == 200 and (c.outcome or "") in ("done:ok", "cut:after-effect")


def end_state(fleet: Any) -> dict[str, tuple[str, str]]:
    return {c.service: (c.file, c.state) for c in fleet.host.containers() if c.state in ("running", "restarting")}


#: commands are forked by a warm fork server (explore_fork.py); EXPLORE_FORK=0: a fresh interpreter each
FORK = os.environ.get("EXPLORE_FORK", "1") != "0"
FAST_COLD_START_S = 900.0  # the CI form: 0.3 s real per cold start


class Execution(DoorMixin):
    """One schedule against one fresh simulator."""

    def __init__(self, schedule: Schedule, workdir: Path, *, verbose: bool = False) -> None:
        from orchestrator_sim import SimConfig, SimFleet
        from orchestrator_sim.explore_entry import aim, sim_field
        from orchestrator_sim.readiness import attach_engine_log

        self.s = schedule
        self.dir = workdir
        self.verbose = verbose
        extra: dict[str, Any] = {}
        log_field = sim_field("log_lines")
        if schedule.log_lines and log_field:
            extra[log_field] = schedule.log_lines
        self.fleet = SimFleet(SimConfig(speed=SPEED, faults=list(schedule.faults),
                                        cold_start_s=FAST_COLD_START_S if schedule.fast else COLD_START_S,
                                        seed=schedule.seed, hosts=tuple(schedule.hosts), **extra))
        aim(self.fleet, schedule.aimed)
        self.env_before: dict[str, str] | None = None
        self.server: Any = None
        self.url = ""
        self.approved: set[tuple[str, str]] = set()
        self.waiting_since: dict[tuple[str, str], float] = {}
        self.engines = attach_engine_log(self.fleet.host)
        self.commands: list[Command] = []
        #: operator asks: (sim time, who, slot or "all", the command, counted only if it exited 0)
        self.permissions: list[tuple[float, str, str, Command | None]] = []
        self.state_after_first: dict[str, tuple[str, str]] = {}
        self.first_end_state: dict[str, tuple[str, str]] | None = None
        self.first_run_id: str | None = None
        self.final_state: dict[str, tuple[str, str]] = {}
        self.lock = threading.Lock()
        self.async_procs: list[tuple[Command, subprocess.Popen[str]]] = []
        self.first_run_end_seq = 0
        self.first_outcome: str | None = None

    # -- environment -------------------------------------------------------------------------
    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
        env.update(self.fleet.env_for_orchestrator(self.dir / "inventory.yaml"))
        env.update({"ORCHESTRATOR_STATE_DIR": str(self.dir), "ORCHESTRATOR_TIME_SCALE": f"{SPEED:g}",
                    "ORCHESTRATOR_LEASE_TTL": f"{LEASE_TTL:g}", "PYTHONUNBUFFERED": "1"})
        if self.s.breaks:  # a hole schedule with a product guard broken on purpose (explore_human.py)
            env["ORCHESTRATOR_TEST_BREAK"] = ",".join(self.s.breaks)
        env.update(extra)
        return env

    def log(self, msg: str) -> None:
        if self.verbose:
            print(f"  [{self.fleet.now():7.0f}s] {msg}", flush=True)

    def runs(self, state: Path | None = None) -> list[dict[str, Any]]:
        db = (state or self.dir) / "journal.sqlite3"
        if not db.exists():
            return []
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
            try:
                rows = con.execute("SELECT run_id, kind, state, terminal, outcome, created_at FROM runs ORDER BY run_seq").fetchall()  # the journal's sequence, never a clock
            finally:
                con.close()
        except sqlite3.Error:
            return []
        return [dict(zip(("run_id", "kind", "state", "terminal", "outcome", "created_at"), r)) for r in rows]

    def newest_run(self) -> dict[str, Any] | None:
        rs = self.runs()
        return rs[-1] if rs else None

    # -- commands ----------------------------------------------------------------------------
    def spawn(self, label: str, args: list[str], *, kill_after: int = 0,
              primed: subprocess.Popen[str] | None = None) -> tuple[Command, subprocess.Popen[str]]:
        cmd = Command(label, args, sim_start=self.fleet.now())
        if primed is not None:  # an interpreter that has imported the CLI already: the action lands now
            assert primed.stdin is not None
            primed.stdin.write(json.dumps(args) + "\n")
            primed.stdin.close()
            primed.stdin = None  # communicate() must not flush it
            proc = primed
        else:
            extra = {"ORCHESTRATOR_TEST_KILL_AFTER": str(kill_after)} if kill_after else {}
            proc = self.launch(args, self.env(**extra), crash=bool(kill_after))
        with self.lock:
            self.commands.append(cmd)
        self.log(f"$ orchestrate {' '.join(args)}" + (f"  (killed after journal write {kill_after})" if kill_after else ""))
        return cmd, proc

    def launch(self, args: list[str], env: dict[str, str], *, crash: bool = True) -> Any:
        """Start `orchestrate ARGS` as its own process (session, process group): forked by this
        process's fork server (explore_fork.py, the CLI imported once), or with EXPLORE_FORK=0 a
        fresh interpreter (`python -m orchestrator_sim.explore_crash` / `orchestrator.cli`)."""
        if FORK:
            from orchestrator_sim.explore_fork import spawn

            with self.lock:
                self.n_out = getattr(self, "n_out", 0) + 1
                out = self.dir / f"cmd-{self.n_out}.out"
            return spawn(args, env, CLI_CWD, out)
        mod = "orchestrator_sim.explore_crash" if crash else "orchestrator.cli"
        return subprocess.Popen([sys.executable, "-m", mod, *args], env=env, cwd=CLI_CWD,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def prime(self) -> subprocess.Popen[str] | None:
        if FORK:  # a fork of the warm server lands within milliseconds: nothing to prime
            return None
        return subprocess.Popen([sys.executable, "-m", "orchestrator_sim.explore_cli"], env=self.env(), cwd=CLI_CWD,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)

    @staticmethod
    def unprime(proc: subprocess.Popen[str] | None) -> None:
        if proc is None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(10)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            proc.kill()
            proc.wait()

    def finish(self, cmd: Command, proc: subprocess.Popen[str], timeout: float = CMD_TIMEOUT_S) -> Command:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            cmd.timed_out = True
        cmd.rc = proc.returncode
        cmd.sim_end = self.fleet.now()
        cmd.wall_end = time.time()
        cmd.tail = (out or "")[-1500:]
        cmd.kept_yes = any("keeps the run's own options" in ln and "--yes" in ln for ln in (out or "").splitlines())
        self.log(f"  -> exit {cmd.rc}{' (timed out)' if cmd.timed_out else ''}{' ' + cmd.note if cmd.note else ''}")
        if self.verbose and cmd.rc not in (0, -9):
            print("     | " + "\n     | ".join(cmd.tail.splitlines()[-6:]), flush=True)
        return cmd

    def run_cmd(self, label: str, args: list[str], *, kill_after: int = 0,
                inflight: int | None = None, during: list[Action] | None = None) -> Command:
        """Run one command to its end, firing `during` actions and an in-flight kill as they come due."""
        start_muts = sum(1 for c in self.fleet.calls if c.is_mutating)
        cmd, proc = self.spawn(label, args, kill_after=kill_after)
        watcher = _Watcher(self, proc, cmd, start_muts, inflight, during or [])
        watcher.start()
        self.finish(cmd, proc)
        watcher.stop()
        return cmd

    def grant(self, who: str, slot: str, cmd: Command | None = None) -> None:
        self.permissions.append((self.fleet.now(), who, slot, cmd))

    def fire(self, a: Action, run_id: str | None, primed: subprocess.Popen[str] | None = None) -> None:
        """An operator action during a run (asynchronous: its process is awaited at the end)."""
        if a.kind in ("abort", "approve"):
            assert run_id is not None
            cmd, proc = self.spawn(a.kind, [a.kind, run_id], primed=primed)
            if a.kind == "abort":
                self.grant("abort", "all", cmd)  # counts if the abort was accepted (exit 0)
        else:  # second-runner
            cmd, proc = self.spawn("second-runner", ["rollout", "gpu02", "--tag", TAG, "--yes"], primed=primed)
        self.async_procs.append((cmd, proc))

    def resume_if_killed(self, cmd: Command) -> Command | None:
        if cmd.rc != -9:
            return None
        time.sleep(LEASE_TTL + 0.3)  # the killed runner's lease expires
        run = self.newest_unfinished()
        if run is None:
            cmd.note = "killed; no unfinished run to resume"
            return None
        args = ["resume", run["run_id"]] + (["--yes"] if self.s.yes else [])
        approvals = [a for a in self.s.during if a.kind == "approve"]
        return self.run_cmd("resume-after-kill", args, during=[Action("approve", trigger=("t", 1.0, 0.0))] if approvals else [])

    def newest_unfinished(self) -> dict[str, Any] | None:
        for r in reversed(self.runs()):
            if not r["terminal"]:
                return r
        return None

    def execute(self) -> None:
        s = self.s
        if s.door != "cli":
            self.execute_door()
            return
        with self.fleet:
            # the first rollout, with its crash point and in-run operator actions
            args = ["rollout", "gpu02", "--tag", TAG] + (["--yes"] if s.yes else [])
            kill_after = s.crash[1] if s.crash and s.crash[0] == "after" else 0
            inflight = s.crash[1] if s.crash and s.crash[0] == "inflight" else None
            first = self.run_cmd("rollout", args, kill_after=kill_after, inflight=inflight, during=s.during)
            first.run_id = (self.runs() or [{}])[0].get("run_id")
            self.resume_if_killed(first)
            for cmd, proc in self.async_procs:
                self.finish(cmd, proc)
            self.async_procs.clear()
            self.first_run_end_seq = max((c.seq for c in self.fleet.calls), default=0)
            self.state_after_first = end_state(self.fleet)
            rs = self.runs()
            self.first_outcome = rs[0]["outcome"] if rs else None
            self.first_run_id = rs[0]["run_id"] if rs else None
            # operator actions once the first run ended
            for a in s.after:
                self.follow_up(a)
            self.final_state = end_state(self.fleet)

    def follow_up(self, a: Action) -> None:
        first = self.first_run_id
        kill = a.crash[1] if a.crash else 0
        if a.kind == "rerun":
            cmd = self.run_cmd("rerun", ["rollout", "gpu02", "--tag", TAG, "--yes"], kill_after=kill)
        elif a.kind == "rollback":
            self.grant(f"rollback --replica {a.arg}", a.arg)
            cmd = self.run_cmd("rollback", ["rollback", "gpu02", "--replica", a.arg], kill_after=kill)
        elif a.kind == "rollback-typo":
            cmd = self.run_cmd("rollback-typo", ["rollback", "gpu02", "--replica", "all", "--to-tag", PREVIOUS_TAG,
                                                 "--to-file", TYPO_FILE])
        elif a.kind in ("resume", "retry"):
            target = self.newest_run()
            run_id = (target or {}).get("run_id") if a.kind == "retry" else first
            if run_id is None:
                return
            cmd = self.run_cmd(a.kind, ["resume", run_id, "--yes"] + (["--retry"] if a.kind == "retry" else []))
        else:
            raise ValueError(a.kind)
        self.resume_if_killed(cmd)


class _Watcher(threading.Thread):
    """Fires in-run operator actions when due and SIGKILLs the runner with a mutating call in flight."""

    def __init__(self, ex: Execution, proc: subprocess.Popen[str], cmd: Command, start_muts: int,
                 inflight: int | None, actions: list[Action]) -> None:
        super().__init__(daemon=True)
        self.ex, self.proc, self.cmd = ex, proc, cmd
        self.start_muts = start_muts
        self.inflight = inflight
        self.pending = list(actions)
        self.primed = {id(a): ex.prime() for a in actions}
        self.t0 = time.monotonic()
        self._halt = threading.Event()
        self.due: dict[int, float] = {}

    def stop(self) -> None:
        self._halt.set()
        self.join(5)
        for a in self.pending:
            self.ex.unprime(self.primed[id(a)])

    def run(self) -> None:
        rec = self.ex.fleet.recorder
        while not self._halt.is_set() and self.proc.poll() is None:
            with rec._lock:  # read in place: a snapshot deep-copies every call (and slows the simulator)
                muts = [c for c in rec._calls if c.is_mutating][self.start_muts:]
            if self.inflight is not None and len(muts) >= self.inflight:
                c = muts[self.inflight - 1]
                self.cmd.note = (f"killed with mutating call #{c.seq} ({c.path} {'/'.join(_mutating_key(c)[3])}) "
                                 + ("in flight" if c.finished_at is None else "just answered"))
                self.proc.send_signal(signal.SIGKILL)
                self.inflight = None
            now = time.monotonic() - self.t0
            for i, a in enumerate(list(self.pending)):
                kind, x, delay = a.trigger or ("t", 0.0, 0.0)
                if kind in ("mut", "done"):
                    reached = len(muts) >= x and (kind == "mut" or muts[int(x) - 1].finished_at is not None)
                    if reached and id(a) not in self.due:
                        self.due[id(a)] = now + delay
                    fire = id(a) in self.due and now >= self.due[id(a)]
                else:
                    fire = now >= x
                if fire:
                    run = self.ex.newest_unfinished()
                    if a.kind != "second-runner" and run is None:
                        continue
                    self.pending.remove(a)
                    self.ex.fire(a, run["run_id"] if run else None, self.primed[id(a)])
            time.sleep(0.01)


# ----------------------------------------------------------------------------- judging
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
        if p is not None and _mutating_key(p) == _mutating_key(c):
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
    # H: humans stay in the loop (orchestrator_sim/explore_human.py)
    from orchestrator_sim.explore_human import check_humans

    out += check_humans([ex.dir / "journal.sqlite3", ex.dir / "other-journal" / "journal.sqlite3"], ex.commands)
    # liveness
    for c in ex.commands:
        if c.timed_out:
            out.append(f"live: `orchestrate {' '.join(c.argv)}` did not end within {CMD_TIMEOUT_S:.0f}s")
        elif c.rc == 1:
            out.append(f"live: `orchestrate {' '.join(c.argv)}` exited 1 (unexpected error): {c.tail[-300:]!r}")
    return out


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
    return Result(None if label else s.seed, s.describe(), s.kinds, violations, round(time.monotonic() - t0, 1),
                  [f"{c.label}: orchestrate {' '.join(c.argv)} -> {c.rc}{' ' + c.note if c.note else ''}" for c in ex.commands],
                  repro or repro_line(s.seed), ex.first_outcome, label=label)


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


# ----------------------------------------------------------------------------- reports
def summarize(results: list[Result]) -> dict[str, Any]:
    kinds = collections.Counter(k for r in results for k in r.kinds)
    return {
        "schedules": len(results),
        "by_kind": dict(sorted(kinds.items())),
        "violating": [asdict(r) for r in results if not r.ok],
        "seconds": round(sum(r.seconds for r in results), 1),
    }


def write_report(results: list[Result], path: Path, title: str) -> dict[str, Any]:
    summary = summarize(results)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# {title}", "", f"schedules: {summary['schedules']}; by kind: "
             + ", ".join(f"{k} {n}" for k, n in summary["by_kind"].items())
             + f"; violating: {len(summary['violating'])}; total {summary['seconds']} s of schedules", ""]
    for r in results:
        if not r.ok:
            lines += [f"## {'seed ' + str(r.seed) if r.seed is not None else r.label}: {r.schedule}", "",
                      f"reproduce: `{r.repro}`", ""]
            lines += [f"- {v}" for v in r.violations] + [""]
            lines += ["commands:", ""] + [f"    {c}" for c in r.commands] + [""]
    path.write_text("\n".join(lines) + "\n")
    path.with_suffix(".json").write_text(json.dumps({**summary, "results": [asdict(r) for r in results]}, indent=1, default=str))
    return summary


def print_result(r: Result) -> None:
    head = f"seed {r.seed}" if r.seed is not None else r.label
    status = "ok" if r.ok else "VIOLATION"
    print(f"{head:>14} {status:9} {r.seconds:5.1f}s {','.join(r.kinds):24} {r.first_outcome or '-':11} {r.schedule}", flush=True)
    if not r.ok:
        for v in r.violations:
            print(f"{'':15} {v}")
        print(f"{'':15} reproduce: {r.repro}", flush=True)


def _seed_job(seed: int, workroot: str, fast: bool = False) -> Result:
    return run_seed(seed, Path(workroot), fast=fast)


def _hole_job(name: str, workroot: str) -> Result:
    return run_hole(name, Path(workroot))


def _sweep_job(kind: str, point: int, base: dict[str, Any], workroot: str) -> Result:
    return sweep_point(kind, point, base, Path(workroot))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orchestrator_sim.explore", description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=None, help="first seed (alone: run just this seed, verbosely)")
    p.add_argument("--seeds", type=int, default=None, help="how many seeds, from --seed (default 0)")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--sweep", choices=["writes", "inflight", "all"], default=None)
    p.add_argument("--hole", action="append", default=None,
                   help=f"run a known-hole schedule by name (or 'all'): {', '.join(HOLES)}")
    p.add_argument("--fast", action="store_true", help="the CI form of each seed's schedule (shorter cold starts, "
                   "base hosts without gpu02's run first)")
    p.add_argument("--door", action="append", default=None,
                   help="with --seeds: only the seeds whose schedule enters by this door (repeatable)")
    p.add_argument("--points", default=None, help="sweep only these points (comma separated)")
    p.add_argument("--report", default=str(ROOT / ".state" / "explore" / "report.md"))
    p.add_argument("--workdir", default=None)
    args = p.parse_args(argv)
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)  # a killed client's socket errors
    workroot = Path(args.workdir or tempfile.mkdtemp(prefix="explore-"))
    workroot.mkdir(parents=True, exist_ok=True)
    results: list[Result] = []
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) if args.jobs > 1 else None

    def collect(futs: list[Any]) -> None:
        for f in futs:
            r = f.result() if pool else f
            print_result(r)
            results.append(r)

    if args.hole:
        names = list(HOLES) if "all" in args.hole else args.hole
        if pool:
            collect([pool.submit(_hole_job, n, str(workroot)) for n in names])
        else:
            for n in names:
                collect([run_hole(n, workroot, verbose=len(names) == 1)])
        title = f"known holes: {len(names)} schedules"
    elif args.sweep:
        base = baseline(workroot)
        writes = len(base["writes"])
        muts = len(base["mutating_calls"])
        print(f"uninterrupted rollout: {writes} journal writes, {muts} mutating calls", flush=True)
        jobs: list[tuple[str, int]] = []
        if args.sweep in ("writes", "all"):
            pts = [int(x) for x in args.points.split(",")] if args.points else list(range(1, writes + 1))
            jobs += [("after", k) for k in pts]
        if args.sweep in ("inflight", "all"):
            pts = [int(x) for x in args.points.split(",")] if args.points and args.sweep == "inflight" else list(range(1, muts + 1))
            jobs += [("inflight", k) for k in pts]
        if pool:
            collect([pool.submit(_sweep_job, k, n, base, str(workroot)) for k, n in jobs])
        else:
            for k, n in jobs:
                collect([sweep_point(k, n, base, workroot)])
        title = f"crash sweep ({args.sweep}): {len(results)} kill points"
    else:
        first = args.seed if args.seed is not None else 0
        n = args.seeds if args.seeds is not None else (1 if args.seed is not None else 20)
        seeds = list(range(first, first + n))
        if args.door:
            seeds = [sd for sd in seeds if draw(sd).door in args.door]
        if n == 1:
            r = run_seed(seeds[0], workroot, verbose=True, fast=args.fast)
            collect([r])
        elif pool:
            collect([pool.submit(_seed_job, sd, str(workroot), args.fast) for sd in seeds])
        else:
            for sd in seeds:
                collect([run_seed(sd, workroot, fast=args.fast)])
        title = f"schedule explorer: seeds {first}..{first + n - 1}"
    if pool:
        pool.shutdown()
    summary = write_report(results, Path(args.report), title)
    print(f"{summary['schedules']} schedules ({', '.join(f'{k} {v}' for k, v in summary['by_kind'].items())}); "
          f"{len(summary['violating'])} violating; report: {args.report}")
    return 1 if summary["violating"] else 0


if __name__ == "__main__":
    sys.exit(main())
