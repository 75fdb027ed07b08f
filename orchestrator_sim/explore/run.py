"""Running one schedule of the explorer (orchestrator_sim/explore/): a fresh simulator, the real
CLI in its own processes (forked by fork.py), operator actions fired when due (`_Watcher`)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from orchestrator_sim.explore.common import (
    CLI_CWD,
    CMD_TIMEOUT_S,
    COLD_START_S,
    FAST_COLD_START_S,
    FORK,
    LEASE_TTL,
    PREVIOUS_TAG,
    SPEED,
    TAG,
    TYPO_FILE,
    WRONG_TARGET,
    Command,
    _Watcher,
    end_state,
)
from orchestrator_sim.explore.door_runs import DoorRuns
from orchestrator_sim.explore.schedule import Action, Schedule


class Execution(DoorRuns):
    """One schedule against one fresh simulator."""

    def __init__(self, schedule: Schedule, workdir: Path, *, verbose: bool = False) -> None:
        from orchestrator_sim import SimConfig, SimFleet
        from orchestrator_sim.explore.doors import aim, sim_field
        from orchestrator_sim.explore.readiness import attach_engine_log

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
        if self.s.breaks:  # a hole schedule with a product guard broken on purpose (human.py)
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
        process's fork server (fork.py, the CLI imported once), or with EXPLORE_FORK=0 a
        fresh interpreter (`python -m orchestrator_sim.explore.crash` / `orchestrator.cli`)."""
        if FORK:
            from orchestrator_sim.explore.fork import spawn

            with self.lock:
                self.n_out = getattr(self, "n_out", 0) + 1
                out = self.dir / f"cmd-{self.n_out}.out"
            return spawn(args, env, CLI_CWD, out)
        mod = "orchestrator_sim.explore.crash" if crash else "orchestrator.cli"
        return subprocess.Popen([sys.executable, "-m", mod, *args], env=env, cwd=CLI_CWD,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def prime(self) -> subprocess.Popen[str] | None:
        if FORK:  # a fork of the warm server lands within milliseconds: nothing to prime
            return None
        return subprocess.Popen([sys.executable, "-m", "orchestrator_sim.explore.primed"], env=self.env(), cwd=CLI_CWD,
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
            # an approve names `*` (every later gate): `approve RUN` alone approves only the gate it waits at
            cmd, proc = self.spawn(a.kind, [a.kind, run_id] + (["--gate", "*"] if a.kind == "approve" else []), primed=primed)
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
        elif a.kind == "rollback-wrong":
            cmd = self.run_cmd("rollback-wrong", ["rollback", "gpu02", "--replica", "all", "--to-tag", WRONG_TARGET[0],
                                                  "--to-file", WRONG_TARGET[1]])
        elif a.kind in ("resume", "retry"):
            target = self.newest_run()
            run_id = (target or {}).get("run_id") if a.kind == "retry" else first
            if run_id is None:
                return
            cmd = self.run_cmd(a.kind, ["resume", run_id, "--yes"] + (["--retry"] if a.kind == "retry" else []))
        else:
            raise ValueError(a.kind)
        self.resume_if_killed(cmd)
