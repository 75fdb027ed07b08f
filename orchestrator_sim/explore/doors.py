"""The explorer's doors: every way a run can be started, resumed, adopted or acted on, drawn per
seed of `python -m orchestrator_sim.explore` and run against one fresh simulator of gpu02 and/or
the base hosts, judged by judge.py (I1-I4, live; H).

A schedule's `door` says how the runs enter (schedule.py draws it; `cli` is the gpu02 CLI
schedule, run by `Execution.execute`). The others are run by `DoorRuns.execute_door` (door_runs.py):

  base      the base fleet (`rollout --hosts` in a drawn order) after gpu02 (full form) or with
            gpu02's prerequisite overridden (fast form); a kill after journal write N or a Ctrl-C
            (SIGINT) at the k-th call, then the fleet command again, `abort RUN` or `resume RUN`;
            perhaps a `rollback gpuNN` afterwards; one base fault drawn with its `@host`
  stall     a command SIGSTOPped right after the k-th call it made (any system: a check) and
            SIGCONTinued after a second command ran to its end: `rollout/rollback gpu04` against
            `rollout gpu03`, or `rollout gpu02` against a second `rollout gpu02` (or a rollback)
            that took over the stalled runner's expired lease
  serve     a CLI rollout of gpu02 killed (or Ctrl-C'd), perhaps `rollback gpu02 --replica all`
            by hand, then `orchestrate serve` on loopback adopts the orphan, or (`--no-adopt`)
            `resume RUN --server URL` sends it there; operators approve or abort from the page
  page      `rollout gpu02 --server URL` (with or without --yes) on a fresh `serve`; the page's
            Approve (the gate its button names, or `*` as the page sends when none is named) and
            Abort, and the CLI's `approve`, each at a moment tied to the k-th mutating call
  clock     a killed gpu02 rollout, `rollback gpu02 --replica all`, then `resume RUN` with the
            wall clock stepped by -1 h or +1 h (the test-only hook ORCHESTRATOR_TEST_CLOCK_OFFSET_S
            of crash.py)
  env       the dashboard's env map changed between runs or after a crash (the HiCache budget, a
            feature flag), then the run resumed, retried, rolled back or started again
  journals  a second `rollout` of the same host from another state directory (another journal)
            at a moment tied to the k-th mutating call of the first
  preview   `plan gpu02 --live` and then the rollout, with the simulator's `dry-run-recreates`
            fault (drawn only when the simulator has that fault)

Every door may also carry an *aimed* 409/500: `busy-409` or `server-500` on one host, hitting that
host's k-th eligible request (the k-th lock taken for busy-409, the k-th request for server-500)
for `count` requests; and *short logs*: every engine keeps only its last N log lines (drawn only
when `SimConfig` has a `*log_lines` field).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from orchestrator_sim.explore.human import PAGE_BY

SERVER_TOKEN = "explore-server-token-6f1e2d3c4b5a69788796a5b4c3d2e1f0"
BASE = ("gpu03", "gpu04", "gpu23")
#: how long the explorer's human lets a run sit at an approval gate before approving it (real s;
#: gpu02's 30 min soak is 0.6 s at speed 3000)
HUMAN_DELAY_S = 1.0
ALL_HOSTS = ("gpu02", *BASE)
DOORS = ("cli", "base", "stall", "serve", "page", "clock", "env", "journals", "preview")
BASE_FAULTS = ("dist-store-error", "drain-stuck", "downloader-fails", "no-rejoin", "host-unhealthy")
ENV_CHANGES = (("GLM53_HICACHE_RAM_BUDGET", "650GiB"), ("GLM53_HICACHE_RAM_BUDGET", "80%"),
               ("GLM53_HICACHE_RAM_BUDGET", "20%"), ("FUSION_ENABLED", "true"))


def sim_field(part: str) -> str | None:
    """The name of a SimConfig field containing `part` (feature detection: None on a simulator
    without it), e.g. `log_lines` for the short-log setting."""
    from orchestrator_sim import SimConfig

    return next((f.name for f in dataclasses.fields(SimConfig) if part in f.name), None)


def has_fault(name: str) -> bool:
    from orchestrator_sim.faults import FAULTS

    return name in FAULTS


def doors_available() -> list[str]:
    return [d for d in DOORS if d != "preview" or has_fault("dry-run-recreates")]


def draw_door(rng: Any, s: Any) -> None:
    """Fill schedule `s` for its (already drawn, not `cli`) door from `rng` (pure)."""
    a: dict[str, Any] = {}
    d = s.door
    if d == "base":
        a["order"] = rng.sample(list(BASE), 3)
        if rng.random() < 0.4:
            name = rng.choice(BASE_FAULTS)
            arg = ":" + rng.choice(["r1", "r2"]) if name == "dist-store-error" else ""
            s.faults.append(f"{name}{arg}@{rng.choice(BASE)}")
        r = rng.random()
        if r < 0.35:
            a["crash"] = ("after", rng.randint(1, 150))
        elif r < 0.55:
            a["crash"] = ("sigint", rng.randint(1, 80))
        if a.get("crash"):
            a["then"] = rng.choice(["again", "again", "abort", "resume"])
        if rng.random() < 0.3:
            a["rollback"] = rng.choice(BASE)
    elif d == "stall":
        a["variant"] = rng.choice(["base-rollout", "base-rollback", "gpu02"])
        a["k"] = rng.randint(1, 40)
        if a["variant"] == "gpu02":
            a["other"] = rng.choice(["rollout", "rollback"])
    elif d == "serve":
        r = rng.random()
        a["crash"] = (("after", rng.randint(1, 96)) if r < 0.4 else ("killdone", rng.randint(1, 12)) if r < 0.7
                      else ("sigint", rng.randint(1, 80)))
        a["rollback"] = rng.random() < 0.5
        a["adopt"] = rng.random() < 0.6
        s.yes = rng.random() < 0.7
        if rng.random() < 0.5:
            a["page"] = [(rng.choice(["page-approve", "approve", "page-abort"]), rng.uniform(0.5, 6.0))]
        if not a["adopt"]:  # a person resumes the Ctrl-C'd/killed run through --server, with or without --yes
            a["resume_yes"] = rng.random() < 0.5
    elif d == "page":
        s.yes = rng.random() < 0.4
        acts = []
        for _ in range(rng.choice([1, 1, 2])):
            acts.append((rng.choice(["page-approve", "page-approve", "approve", "page-abort"]),
                         rng.choice(["mut", "done"]), rng.randint(1, 12)))
        a["actions"] = acts
    elif d == "clock":
        a["kill"] = rng.randint(10, 96)
        a["step"] = rng.choice([-3600, 3600])
        a["rollback"] = rng.random() < 0.8
        # which command sees the stepped clock
        a["when"] = rng.choice(["resume", "rollback"]) if a["rollback"] else "resume"
    elif d == "env":
        a["change"] = rng.choice(ENV_CHANGES)
        a["kill"] = rng.randint(10, 96) if rng.random() < 0.7 else 0
        a["then"] = rng.choice(["resume", "retry", "rollback", "rerun"])
    elif d == "journals":
        a["trigger"] = (rng.choice(["mut", "done"]), rng.randint(1, 12))
        a["host"] = rng.choice(["gpu02", "gpu02", "gpu03"])
    elif d == "preview":
        s.faults.append("dry-run-recreates")
        a["plan"] = True
    s.door_args = a
    if d in ("base", "stall") or a.get("host") in BASE:
        s.hosts = ALL_HOSTS


def draw_extras(rng: Any, s: Any) -> None:
    """The modifiers every door may carry: an aimed 409/500, short engine logs."""
    if rng.random() < 0.3:
        name = rng.choice(["busy-409", "server-500"])
        host = rng.choice(list(s.hosts))
        k = rng.randint(1, 14) if name == "busy-409" else rng.randint(1, 80)
        s.aimed = [(name, host, k, rng.randint(1, 3))]
    field_name = sim_field("log_lines")
    if field_name and rng.random() < 0.25:
        s.log_lines = rng.choice([50, 200, 500])


def aim(fleet: Any, aimed: list[tuple[str, str, int, int]]) -> None:
    """Make `busy-409`/`server-500` hit host H's k-th..(k+count-1)-th eligible request: the host's
    fault view answers `take(name)` True exactly then (the simulator asks once per eligible
    request: server-500 on every compose-manager request, busy-409 whenever the lock is taken)."""
    for name, host, k, count in aimed:
        h = fleet.hosts[host]
        view = h.faults
        original = view.take
        seen = {"n": 0}
        lock = threading.Lock()

        def take(n: str, _name=name, _k=k, _count=count, _orig=original, _seen=seen, _lock=lock) -> bool:
            if n == _name:
                with _lock:
                    _seen["n"] += 1
                    if _k <= _seen["n"] < _k + _count:
                        return True
            return _orig(n)

        view.take = take  # type: ignore[method-assign]  # the door's hook on this one view


def free_port() -> int:
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return int(sk.getsockname()[1])


class DoorMixin:
    """`Execution` methods for the doors (mixed into explore.Execution)."""

    # -- commands ------------------------------------------------------------------------------
    def door_cmd(self, label: str, args: list[str], *, kill_after: int = 0, sigint_at: int | None = None,
                 offset: float = 0.0, state: Path | None = None, during: list[Any] | None = None,
                 grant: str | None = None, background: bool = False, client: bool = False,
                 kill_done: int | None = None) -> Any:
        """Run `orchestrate ARGS` through crash.py (kill after write N, clock offset), with a
        Ctrl-C (SIGINT) when the k-th call since it started arrives. `grant`: the operator's ask
        this command is (a slot or `all`), counted if it exits 0 or is still running."""
        from orchestrator_sim.explore.common import Command

        extra = {"ORCHESTRATOR_TEST_KILL_AFTER": str(kill_after), "ORCHESTRATOR_TEST_CLOCK_OFFSET_S": f"{offset:g}"}
        if state is not None:
            extra["ORCHESTRATOR_STATE_DIR"] = str(state)
        env = self.env(**extra)
        if client:
            env = {k: v for k, v in env.items() if not k.startswith("ORCHESTRATOR_")}
            env["ORCHESTRATOR_SERVER_TOKEN"] = SERVER_TOKEN
        cmd = Command(label, args, sim_start=self.fleet.now(), note=f"clock {offset:+g}s" if offset else "")
        cmd.offset = offset
        if grant:  # an abort counts once accepted (exit 0); a rollback is the ask whatever it ends in
            self.grant(label, grant, cmd if args[0] == "abort" else None)
        start_calls = len(self.fleet.recorder._calls)
        proc = self.launch(args, env)
        with self.lock:
            self.commands.append(cmd)
        self.log(f"$ orchestrate {' '.join(args)}" + (f"  (killed after journal write {kill_after})" if kill_after else "")
                 + (f"  (clock {offset:+g}s)" if offset else ""))
        if sigint_at:
            threading.Thread(target=self._signal_at, args=(proc, cmd, start_calls, sigint_at, signal.SIGINT),
                             daemon=True).start()
        if kill_done:
            threading.Thread(target=self._kill_after_done, args=(proc, cmd, kill_done), daemon=True).start()
        if background:
            return cmd, proc
        from orchestrator_sim.explore.common import _Watcher

        start_muts = sum(1 for c in self.fleet.recorder._calls if c.is_mutating)
        watcher = _Watcher(self, proc, cmd, start_muts, None, during or [])
        watcher.start()
        self.finish(cmd, proc)
        watcher.stop()
        return cmd

    def _kill_after_done(self, proc: subprocess.Popen[str], cmd: Any, k: int, delay: float = 0.15) -> None:
        """SIGKILL the command `delay` real seconds after the k-th mutating call since now was
        answered (e.g. k=7: during r1's cold start)."""
        start = sum(1 for c in self.fleet.recorder._calls if c.is_mutating)
        while proc.poll() is None:
            with self.fleet.recorder._lock:
                muts = [c for c in self.fleet.recorder._calls if c.is_mutating][start:]
            if len(muts) >= k and muts[k - 1].finished_at is not None:
                time.sleep(delay)
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    return
                cmd.note = (cmd.note + " " if cmd.note else "") + f"SIGKILL {delay}s after mutating call {k} answered"
                return
            time.sleep(0.002)

    def _signal_at(self, proc: subprocess.Popen[str], cmd: Any, start: int, k: int, sig: int) -> bool:
        """Send `sig` to the command's process group when the k-th call since `start` arrived."""
        while proc.poll() is None:
            if len(self.fleet.recorder._calls) - start >= k:
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    return False
                cmd.note = (cmd.note + " " if cmd.note else "") + f"{signal.Signals(sig).name} at call {k}"
                return True
            time.sleep(0.002)
        return False

    def unfinished(self, state: Path | None = None) -> dict[str, Any] | None:
        for r in reversed(self.runs(state)):
            if not r["terminal"]:
                return r
        return None

    def wait_lease(self) -> None:
        from orchestrator_sim.explore.common import LEASE_TTL

        time.sleep(LEASE_TTL + 0.3)

    def yes(self) -> list[str]:
        return ["--yes"] if self.s.yes else []

    def ensure_first(self) -> None:
        rs = self.runs()
        self.first_outcome = rs[0]["outcome"] if rs else None
        self.first_run_id = rs[0]["run_id"] if rs else None

    # -- serve ---------------------------------------------------------------------------------
    def start_serve(self, *, adopt: bool = True) -> str:
        from orchestrator_sim.explore.common import Command

        port = free_port()
        args = ["serve", "--port", str(port)] + ([] if adopt else ["--no-adopt"])
        env = self.env(ORCHESTRATOR_SERVER_TOKEN=SERVER_TOKEN)
        proc = self.launch(args, env)
        cmd = Command("serve", args, sim_start=self.fleet.now())
        self.commands.append(cmd)
        self.server = (cmd, proc)
        url = f"http://127.0.0.1:{port}"
        import httpx

        for _ in range(600):
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        self.log(f"$ orchestrate {' '.join(args)}  -> {url}")
        self.url = url
        return url

    def approve_waiting(self, going: Any, timeout: float = 150.0) -> None:
        """Without --yes (or for a run the server adopted, which waits for a human whatever was
        stored): the operator approves each soak gate the run waits at, by its name, from the CLI."""
        t0 = time.monotonic()
        while going() and time.monotonic() - t0 < timeout:
            self.approve_if_waited()
            time.sleep(0.1)

    def approve_if_waited(self) -> None:
        """The human: approves a soak gate by name once the run has sat at it for HUMAN_DELAY_S real
        seconds (longer than any soak of the explorer's runbooks at its speed), so that a run that
        passes a gate without waiting for a human shows (invariant H1, human.py)."""
        if self.s.door_args.get("no_human"):
            return
        run = self.unfinished()
        state = (run or {}).get("state") or ""
        if not run or "soak" not in state or (run["run_id"], state) in self.approved:
            return
        key = (run["run_id"], state)
        first = self.waiting_since.setdefault(key, time.monotonic())
        if time.monotonic() - first >= HUMAN_DELAY_S:
            self.approved.add(key)
            self.door_cmd("approve", ["approve", run["run_id"], "--gate", state])

    def stop_serve(self, timeout: float = 180.0, quiet_s: float = 6.0) -> None:
        """Wait until every run of the journal ended (the server drives them) or nothing happened
        for `quiet_s` real seconds (no call reached the simulator: a run nobody drives, e.g. one
        the server would not adopt), then stop the server."""
        cmd, proc = self.server
        t0 = time.monotonic()
        last_n, last_t = -1, time.monotonic()
        while proc.poll() is None:
            rs = self.runs()
            if rs and all(r["terminal"] for r in rs):
                break
            n = len(self.fleet.recorder._calls)
            if n != last_n:
                last_n, last_t = n, time.monotonic()
            elif time.monotonic() - last_t > quiet_s:
                cmd.note = "runs left unfinished with nobody driving them"
                break
            if time.monotonic() - t0 > timeout:
                cmd.timed_out = True
                break
            self.approve_if_waited()
            time.sleep(0.1)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        self.finish(cmd, proc, timeout=30)
        if cmd.rc not in (0, -15, None):
            cmd.note = f"server exit {cmd.rc}"
        if cmd.rc in (-15, 0):
            cmd.rc = 0

    def page(self, action: str, run_id: str) -> None:
        """What the run page's buttons send: Approve posts the gate its button names (data-gate,
        or `*` when none is named, as app.js does); Abort posts an abort."""
        import httpx

        h = {"Authorization": f"Bearer {SERVER_TOKEN}"}
        try:
            if action == "page-approve":
                frag = httpx.get(f"{self.url}/ui/fragments/runs/{run_id}", headers=h, timeout=10).text
                m = re.search(r'id="approve" data-gate="([^"]*)"', frag)
                gate = (m.group(1) if m else "") or "*"
                # a browser's POST (Origin): the gate the button names, or `*` as a stale page
                # (the app.js before issue 21) sends when none is named; the server must refuse it
                r = httpx.post(f"{self.url}/runs/{run_id}/approve", json={"gate": gate, "by": PAGE_BY},
                               headers={**h, "Origin": self.url}, timeout=10)
                self.log(f"page Approve (gate {gate}) -> {r.status_code}")
            else:
                r = httpx.post(f"{self.url}/runs/{run_id}/abort", json={}, headers=h, timeout=10)
                self.log(f"page Abort -> {r.status_code}")
                if r.status_code < 300:
                    self.grant("page-abort", "all")
        except httpx.HTTPError as exc:
            self.log(f"page {action}: {exc}")


def clock_offset_hook() -> None:
    """Test-only: step the orchestrator's wall clock by ORCHESTRATOR_TEST_CLOCK_OFFSET_S seconds
    (as a host whose clock NTP stepped). Replaces `datetime` in every imported `orchestrator`
    module that imported the class by name (the journal's timestamps, lease expiry, tag ages,
    prerequisites) with a subclass whose now()/utcnow() add the offset. Used only by
    orchestrator_sim/explore/crash.py, never by the product."""
    raw = os.environ.get("ORCHESTRATOR_TEST_CLOCK_OFFSET_S", "").strip()
    if not raw or float(raw) == 0:
        return
    import datetime as _dt
    import importlib

    offset = _dt.timedelta(seconds=float(raw))

    class SteppedDatetime(_dt.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:  # type: ignore[override]  # the stepped clock, same call shape
            return _dt.datetime.now(tz) + offset

        @classmethod
        def utcnow(cls) -> Any:  # type: ignore[override]  # the stepped clock, same call shape
            return _dt.datetime.utcnow() + offset

    for mod in ("orchestrator.cli", "orchestrator.service.runner", "orchestrator.journal.sql", "orchestrator.journal.base",
                "orchestrator.engine.steps.checks", "orchestrator.service.activity", "orchestrator.engine.fleet",
                "orchestrator.engine.rules.prerequisites", "orchestrator.engine.executor.runtime", "orchestrator.teamserver.worker",
                "orchestrator.teamserver.pages", "orchestrator.service.startup"):
        try:
            importlib.import_module(mod)
        except ImportError:
            continue
    for name, m in list(sys.modules.items()):
        if name.startswith("orchestrator.") and getattr(m, "datetime", None) is _dt.datetime:
            m.datetime = SteppedDatetime  # type: ignore[attr-defined]  # each module's own datetime name, replaced


def describe_door(s: Any) -> str:
    parts = [f"door={s.door}"]
    if s.door_args:
        parts.append(json.dumps(s.door_args, separators=(",", ":")))
    if s.aimed:
        parts.append("aimed " + ", ".join(f"{n}@{h} request {k} x{c}" for n, h, k, c in s.aimed))
    if s.log_lines:
        parts.append(f"logs keep last {s.log_lines} lines")
    return " ".join(parts)
