"""What the explorer's modules share, below all of them (no import circle, issue 26): the
constants of a schedule, a command's record (`Command`), the call keys the judge compares, and the
watcher that fires in-run operator actions (`_Watcher`)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator_sim.faults import FAULTS

ROOT = Path(__file__).resolve().parents[2]
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
#: a file the target tag holds that is the wrong one for gpu02 (the canonical FP8 file, which
#: defines no W4AFP8 engine): a rollback to it must be refused before anything is stopped
WRONG_TARGET = ("v0.0.300", "prod/GLM-5.3-Flash-SGL-TP4.yaml")
#: the faults a gpu02 schedule draws from: the base tier's (scope "base") never hit gpu02, so
#: drawing them would only dilute the schedules (and shift every seed's draw)
GPU02_FAULTS = frozenset(n for n, f in FAULTS.items() if f.scope != "base" and f.drawn)
#: faults whose gate fails on whichever replica is being moved (not tied to r1/r2)
GATE_FAULTS = frozenset({"peer-missing", "cache-miss", "dry-run-extra-recreate", "dry-run-extra-remove",
                         "dry-run-not-dry", "dry-run-recreates", "perception-fails"})
#: upper bound for a drawn kill point (an uninterrupted rollout makes ~this many journal writes)
MAX_WRITE = 96
MAX_MUTATING = 15  # r2: 8 (its collector recreate alone since docker/compose#11900), r1: 6, reconcile: 1


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
    """The containers docker keeps up at the end, with the file that defines each. `running` and
    `restarting` are one state here ("up"): a container in a restart loop flips between the two on
    docker's schedule, not the orchestrator's, so when the snapshot is taken decides which it shows
    (seed 745: `dry-run-not-dry` left a new r2 crash-looping beside the old one, `running` after the
    resume and `restarting` in the uninterrupted run, the runs alike)."""
    return {c.service: (c.file, "up") for c in fleet.host.containers() if c.state in ("running", "restarting")}


#: commands are forked by a warm fork server (fork.py); EXPLORE_FORK=0: a fresh interpreter each
FORK = os.environ.get("EXPLORE_FORK", "1") != "0"
FAST_COLD_START_S = 900.0  # the CI form: 0.3 s real per cold start


class _Watcher(threading.Thread):
    """Fires in-run operator actions when due and SIGKILLs the runner with a mutating call in flight."""

    def __init__(self, ex: Any, proc: subprocess.Popen[str], cmd: Command, start_muts: int,
                 inflight: int | None, actions: list[Any]) -> None:
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
