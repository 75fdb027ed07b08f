"""The explorer's doors (issue 21): seeded schedules over gpu02 and the three base hosts through the
ways a run enters besides a plain rollout: a fleet command, `orchestrate serve` adopting an orphan,
`resume --server`, a journal clock stepped by +-1 h, a rollback stalled between its checks and its
run while another host of the tier moves, Ctrl-C or a crash at a drawn state, an abort of a run
nobody drives. Each schedule runs the real CLI (and server) in subprocesses against a fresh
simulator (orchestrator_sim/explore_hooks.py adds the hooks) and is judged on the simulator's own
record: `check_invariants()` (gpu02: one replica ready at every moment, no healthy engine torn down
unasked, no mutating call repeated...; base tier: n-1 of n hosts serving at every moment, drain
before stop), no command exits 1 (a bug) or hangs.

    python -m orchestrator_sim.explore_doors --seeds 0-9 [--verbose]
    python -m orchestrator_sim.explore_doors --seed 3 --verbose

The schedules draw from their own random stream (seeds here are not the main explorer's seeds).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator_sim.explore import CLI_CWD

SPEED = "3000"
BASE_HOSTS = ("gpu03", "gpu04", "gpu23")
BASE_TAG = "v0.0.310"
GPU02 = ["rollout", "gpu02", "--tag", "v0.0.300", "--yes", "--soak", "0"]
FLEET = ["rollout", "--hosts", ",".join(BASE_HOSTS), "--tag", BASE_TAG, "--yes", "--soak", "0",
         "--override-prerequisite", "gpu02"]
SCENARIOS = ("clock-step", "serve-adopts", "server-resume", "stall-rollback", "fleet-ctrl-c")
CMD_TIMEOUT_S = 300.0
TOKEN = "srv-explore-doors-0a9b2e4d6f8a1c3e5b7d9f"


@dataclass
class Door:
    seed: int
    scenario: str
    shift: float = 0.0
    stop_at: str = ""  # HOST:STATE:SIGNAL
    stall_until: str = ""

    def describe(self) -> str:
        parts = [self.scenario]
        if self.stop_at:
            parts.append(f"stop {self.stop_at}")
        if self.shift:
            parts.append(f"clock {self.shift:+.0f}s")
        if self.stall_until:
            parts.append(f"stall until gpu03 at {self.stall_until}")
        return "; ".join(parts)


def draw(seed: int) -> Door:
    rng = random.Random(f"doors-{seed}")
    d = Door(seed, rng.choice(SCENARIOS))
    if d.scenario in ("clock-step", "serve-adopts", "server-resume"):
        d.stop_at = f"gpu02:{rng.choice(['r2.cold-start', 'r1.cold-start', 'r2.soak', 'preflight.'])}:" \
                    f"{rng.choice(['SIGKILL', 'SIGINT'])}"
        d.shift = rng.choice([-3600.0, 3600.0, 0.0]) if d.scenario == "clock-step" else 0.0
    elif d.scenario == "stall-rollback":
        d.stall_until = rng.choice(["preflight.capacity", "capacity.", "drain.", "switch."])
    else:
        d.stop_at = f"{rng.choice(BASE_HOSTS)}:{rng.choice(['preflight.', 'drain.', 'switch.'])}:" \
                    f"{rng.choice(['SIGINT', 'SIGKILL'])}"
    return d


@dataclass
class Outcome:
    door: Door
    violations: list[str] = field(default_factory=list)
    commands: list[tuple[str, int]] = field(default_factory=list)
    seconds: float = 0.0


class DoorRun:
    def __init__(self, door: Door, workdir: Path, verbose: bool = False) -> None:
        from orchestrator_sim import SimConfig, SimFleet

        self.door, self.dir, self.verbose = door, workdir, verbose
        self.fleet = SimFleet(SimConfig(speed=float(SPEED), cold_start_s=1200, hosts=("gpu02", *BASE_HOSTS),
                                        seed=door.seed))
        self.out = Outcome(door)
        self.servers: list[subprocess.Popen[str]] = []

    def env(self, **hooks: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
        env.update(self.fleet.env_for_orchestrator(self.dir / "inventory.yaml"))
        env.update({"ORCHESTRATOR_STATE_DIR": str(self.dir / "state"), "ORCHESTRATOR_TIME_SCALE": SPEED,
                    "ORCHESTRATOR_POLL_INTERVAL": "10", "ORCHESTRATOR_SERVER_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1"})
        env.update({f"ORCHESTRATOR_TEST_{k.upper()}": v for k, v in hooks.items() if v})
        return env

    def start(self, label: str, *args: str, **hooks: str) -> tuple[str, subprocess.Popen[str]]:
        if self.verbose:
            print(f"  $ orchestrate {' '.join(args)} {hooks or ''}", flush=True)
        return label, subprocess.Popen([sys.executable, "-m", "orchestrator_sim.explore_hooks", *args], env=self.env(**hooks),
                                       cwd=CLI_CWD, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       start_new_session=True)

    def finish(self, started: tuple[str, subprocess.Popen[str]]) -> int:
        label, proc = started
        try:
            out, _ = proc.communicate(timeout=CMD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            self.out.violations.append(f"{label} did not end within {CMD_TIMEOUT_S:.0f} s")
        rc = proc.returncode
        self.out.commands.append((label, rc))
        if rc == 1 or "Traceback" in (out or ""):
            self.out.violations.append(f"{label} exited {rc} (a bug): {(out or '')[-600:]}")
        if self.verbose:
            print(f"    -> {rc}  {(out or '').strip().splitlines()[-1:] if out else ''}", flush=True)
        return rc

    def run(self, label: str, *args: str, **hooks: str) -> int:
        return self.finish(self.start(label, *args, **hooks))

    def runs(self, host: str | None = None) -> list[dict[str, Any]]:
        db = self.dir / "state" / "journal.sqlite3"
        if not db.exists():
            return []
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            rows = con.execute("SELECT run_id, host, kind, state, terminal FROM runs ORDER BY run_seq DESC").fetchall()
        finally:
            con.close()
        return [dict(zip(("run_id", "host", "kind", "state", "terminal"), r)) for r in rows
                if host is None or r[1] == host]

    def serve(self) -> str:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        log = (self.dir / f"serve{len(self.servers)}.log").open("w")
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "serve", "--port", str(port)], cwd=CLI_CWD,
                                env={**self.env(), "ORCHESTRATOR_LEASE_TTL": "1.5"}, stdout=log,
                                stderr=subprocess.STDOUT, text=True)
        self.servers.append(proc)
        import httpx

        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    return url
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.out.violations.append("serve never listened")
        return url

    # -- scenarios -------------------------------------------------------------------------
    def history(self, shift: float = 0.0) -> str | None:
        """gpu02's rollout stopped at the drawn state, then `rollback gpu02 --replica all` by hand
        (the journal clock shifted by `shift`); returns the stopped run's id."""
        self.run("rollout", *GPU02, signal_at=self.door.stop_at)
        first = next(iter(self.runs("gpu02")), None)
        if first is None or first["terminal"]:
            return None
        self.run("rollback", "rollback", "gpu02", "--replica", "all",
                 journal_shift_s=str(shift) if shift else "")
        return first["run_id"]

    def clock_step(self) -> None:
        first = self.history(self.door.shift)
        if first:
            self.run("resume-superseded", "resume", first, "--yes", "--soak", "0")

    def serve_adopts(self) -> None:
        first = self.history()
        if first:
            self.serve()
            time.sleep(4)  # several adoption rounds

    def server_resume(self) -> None:
        first = self.history()
        if first:
            url = self.serve()
            self.run("resume --server", "resume", first, "--server", url)
            time.sleep(2)

    def stall_rollback(self) -> None:
        if self.run("rollout gpu04", "rollout", "gpu04", "--tag", BASE_TAG, "--yes", "--soak", "0",
                    "--override-prerequisite", "gpu02") != 0:
            return
        stall = self.dir / "go"
        rollback = self.start("stalled rollback gpu04", "rollback", "gpu04", stall_file=str(stall))
        deadline = time.monotonic() + 120
        while not Path(str(stall) + ".waiting").exists() and rollback[1].poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        rollout = self.start("rollout gpu03", "rollout", "gpu03", "--tag", BASE_TAG, "--yes", "--soak", "0",
                             "--override-prerequisite", "gpu02")
        while rollout[1].poll() is None and time.monotonic() < deadline + 300:
            if any(r["state"].startswith(self.door.stall_until) for r in self.runs("gpu03")):
                break
            time.sleep(0.05)
        stall.write_text("go")
        self.finish(rollback)
        self.finish(rollout)

    def fleet_ctrl_c(self) -> None:
        self.run("fleet", *FLEET, signal_at=self.door.stop_at)
        self.run("fleet again", *FLEET)
        for r in self.runs():
            if not r["terminal"]:
                self.run(f"abort {r['run_id']}", "abort", r["run_id"])
        for r in self.runs():  # an abort left to `resume` (the run changed its host): it performs the rollback
            if not r["terminal"]:
                self.run(f"resume {r['run_id']}", "resume", r["run_id"], "--yes", "--soak", "0")
        self.run("fleet after the aborts", *FLEET)

    def execute(self) -> Outcome:
        t0 = time.monotonic()
        with self.fleet:
            try:
                getattr(self, self.door.scenario.replace("-", "_"))()
            finally:
                for p in self.servers:
                    if p.poll() is None:
                        p.send_signal(signal.SIGTERM)
                        try:
                            p.wait(15)
                        except subprocess.TimeoutExpired:
                            p.kill()
            self.out.violations += self.fleet.check_invariants()
        self.out.seconds = time.monotonic() - t0
        return self.out


def run_door(seed: int, verbose: bool = False) -> Outcome:
    with tempfile.TemporaryDirectory(prefix=f"doors-{seed}-") as tmp:
        return DoorRun(draw(seed), Path(tmp), verbose).execute()


def _seeds(text: str) -> list[int]:
    if "-" in text:
        a, b = text.split("-", 1)
        return list(range(int(a), int(b) + 1))
    return [int(x) for x in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m orchestrator_sim.explore_doors", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0-4", help="seeds: A-B or A,B,C")
    ap.add_argument("--seed", type=int, help="one seed")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else _seeds(args.seeds)
    bad = 0
    for seed in seeds:
        o = run_door(seed, verbose=args.verbose or args.seed is not None)
        bad += bool(o.violations)
        print(f"doors:{seed:<5} {'VIOLATION' if o.violations else 'ok':<10} {o.seconds:6.1f}s  {o.door.describe()}  "
              f"exits: {', '.join(f'{label}={rc}' for label, rc in o.commands)}", flush=True)
        for v in o.violations:
            print(f"    ! {v}", flush=True)
    print(f"{len(seeds)} door schedules; {bad} violating")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
