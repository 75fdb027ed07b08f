"""The doors of the main explorer (doors.py describes them): how each door's schedule runs,
as `Execution` methods (run.Execution mixes `DoorRuns` in; the commands, `serve` and the
page's buttons are doors.DoorMixin's)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from orchestrator_sim.explore.doors import DoorMixin


class DoorRuns(DoorMixin):
    """`Execution` methods: one `door_NAME` per door."""

    # -- the doors -----------------------------------------------------------------------------
    def execute_door(self) -> None:
        with self.fleet:
            getattr(self, "door_" + self.s.door)(self.s.door_args)
            self.ensure_first()
            self.final_state = self.end_state_now()

    def end_state_now(self) -> dict[str, tuple[str, str]]:
        from orchestrator_sim.explore.common import end_state

        return end_state(self.fleet)

    def gpu02_first(self) -> None:
        from orchestrator_sim.explore.common import TAG

        self.door_cmd("gpu02", ["rollout", "gpu02", "--tag", TAG, "--yes", "--soak", "0"])

    def base_rollout(self, host: str, **kw: Any) -> Any:
        from orchestrator_sim import BASE_TARGET_TAG

        over = ["--override-prerequisite", "gpu02"] if self.s.fast else []
        return self.door_cmd(f"rollout {host}", ["rollout", host, "--tag", BASE_TARGET_TAG, "--yes", "--soak", "0", *over], **kw)

    def door_base(self, a: dict[str, Any]) -> None:
        from orchestrator_sim import BASE_TARGET_TAG

        if not self.s.fast:
            self.gpu02_first()
        over = ["--override-prerequisite", "gpu02"] if self.s.fast else []
        fleet_args = ["rollout", "--hosts", ",".join(a["order"]), "--tag", BASE_TARGET_TAG, "--yes", "--soak", "0", *over]
        crash = a.get("crash")
        kill = crash[1] if crash and crash[0] == "after" else 0
        sigint = crash[1] if crash and crash[0] == "sigint" else None
        first = self.door_cmd("fleet", fleet_args, kill_after=kill, sigint_at=sigint)
        if crash and first.rc != 0:
            self.wait_lease()
            run = self.unfinished()
            then = a.get("then")
            if then == "abort" and run:
                self.door_cmd("abort", ["abort", run["run_id"]], grant="all")
            elif then == "resume" and run:
                self.door_cmd("resume", ["resume", run["run_id"], "--yes", "--soak", "0"])
            self.door_cmd("fleet-again", fleet_args)
        if a.get("rollback"):
            self.door_cmd(f"rollback {a['rollback']}", ["rollback", a["rollback"]], grant="all")

    def door_stall(self, a: dict[str, Any]) -> None:
        from orchestrator_sim.explore.common import TAG

        v = a["variant"]
        if v != "gpu02" and not self.s.fast:
            self.gpu02_first()
        if v == "base-rollback":
            self.base_rollout("gpu04")
        if v == "gpu02":
            args = ["rollout", "gpu02", "--tag", TAG, "--yes"]
            label = "rollout gpu02"
        elif v == "base-rollback":
            args, label = ["rollback", "gpu04"], "rollback gpu04"
        else:
            from orchestrator_sim import BASE_TARGET_TAG

            args = ["rollout", "gpu04", "--tag", BASE_TARGET_TAG, "--yes", "--soak", "0"] + (
                ["--override-prerequisite", "gpu02"] if self.s.fast else [])
            label = "rollout gpu04"
        cmd, proc = self.door_cmd(label, args, background=True, grant="all" if v == "base-rollback" else None)
        start = len(self.fleet.recorder._calls)
        stopped = self._signal_at(proc, cmd, start, a["k"], signal.SIGSTOP)
        if stopped:
            self.wait_lease()  # a stall longer than the lease: the stalled runner's lease has expired
            if v == "gpu02":
                if a["other"] == "rollout":
                    self.door_cmd("second rollout gpu02", ["rollout", "gpu02", "--tag", TAG, "--yes"])
                else:
                    self.door_cmd("rollback gpu02", ["rollback", "gpu02", "--replica", "all"], grant="all")
            else:
                self.base_rollout("gpu03")
            try:
                os.killpg(proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.finish(cmd, proc)

    def door_serve(self, a: dict[str, Any]) -> None:
        from orchestrator_sim.explore.common import TAG

        kind, n = a["crash"]
        first, proc = self.door_cmd("rollout", ["rollout", "gpu02", "--tag", TAG, *self.yes()], background=True,
                                    kill_after=n if kind == "after" else 0, sigint_at=n if kind == "sigint" else None,
                                    kill_done=n if kind == "killdone" else None)
        # without --yes the first rollout waits at r2.soak: the human approves it (seed 163 waited
        # there until the explorer's timeout when its kill point came after the gate)
        self.approve_waiting(lambda: proc.poll() is None)
        self.finish(first, proc)
        if first.rc == 0:
            return
        run = self.unfinished()
        if a.get("rollback"):
            self.wait_lease()
            self.door_cmd("rollback", ["rollback", "gpu02", "--replica", "all"], grant="all")
        url = self.start_serve(adopt=a["adopt"])
        if not a["adopt"] and run:
            yes = self.yes() if a.get("resume_yes", True) else []
            # without --yes the resumed run waits at each soak gate for the human too (seed 181 waited
            # at r2.soak until the explorer's timeout, its approval drawn for after the resume ended)
            cmd, rproc = self.door_cmd("resume --server", ["resume", run["run_id"], *yes, "--server", url], client=True,
                                       background=True)
            self.approve_waiting(lambda: rproc.poll() is None)
            self.finish(cmd, rproc)
        for action, at in a.get("page", []):
            time.sleep(at)
            target = self.unfinished()
            if target is None:
                break
            if action == "approve":
                self.door_cmd("approve", ["approve", target["run_id"], "--gate", "*"])  # by name (approval_scope.py)
            else:
                self.page(action, target["run_id"])
        self.stop_serve()

    def door_page(self, a: dict[str, Any]) -> None:
        from orchestrator_sim.explore.common import TAG

        url = self.start_serve()
        cmd, proc = self.door_cmd("rollout --server", ["rollout", "gpu02", "--tag", TAG, *self.yes(), "--server", url],
                                  background=True, client=True)
        muts0 = 0
        for action, when, k in a["actions"]:
            t0 = human_t = time.monotonic()
            while proc.poll() is None and time.monotonic() - t0 < 120:
                with self.fleet.recorder._lock:
                    muts = [c for c in self.fleet.recorder._calls if c.is_mutating][muts0:]
                if len(muts) >= k and (when == "mut" or muts[k - 1].finished_at is not None):
                    break
                if not self.yes() and time.monotonic() - human_t >= 0.1:
                    human_t = time.monotonic()  # the run may wait at a soak gate before that call: the human approves it
                    self.approve_if_waited()
                time.sleep(0.005)
            run = self.unfinished()
            if run is None:
                break
            if action == "approve":
                self.door_cmd("approve", ["approve", run["run_id"], "--gate", "*"])  # by name (approval_scope.py)
            else:
                self.page(action, run["run_id"])
        self.approve_waiting(lambda: proc.poll() is None)
        self.finish(cmd, proc)
        self.stop_serve()

    def door_clock(self, a: dict[str, Any]) -> None:
        from orchestrator_sim.explore.common import TAG

        first = self.door_cmd("rollout", ["rollout", "gpu02", "--tag", TAG, "--yes"], kill_after=a["kill"])
        if first.rc == 0:
            return
        run = self.unfinished()
        self.wait_lease()
        if a["rollback"]:
            self.door_cmd("rollback", ["rollback", "gpu02", "--replica", "all"], grant="all",
                          offset=a["step"] if a["when"] == "rollback" else 0)
        if run:
            self.door_cmd("resume", ["resume", run["run_id"], "--yes"], offset=a["step"] if a["when"] == "resume" else 0)

    def door_env(self, a: dict[str, Any]) -> None:
        from orchestrator_sim.explore.common import TAG

        first = self.door_cmd("rollout", ["rollout", "gpu02", "--tag", TAG, "--yes"], kill_after=a["kill"])
        run = self.unfinished() or self.newest_run()
        key, value = a["change"]
        self.env_before = dict(self.fleet.dashboard_env)
        self.fleet.set_env_var(key, value)
        self.log(f"dashboard: {key}={value}")
        # a human changed the env map: the gates that re-check it (the budget, the env map whole)
        # may fail on whichever replica is moved next, and rolling that replica back is the rule
        self.grant(f"env map changed ({key})", "all")
        if first.rc == -9:
            self.wait_lease()
        then = a["then"]
        if then == "rollback":
            self.door_cmd("rollback", ["rollback", "gpu02", "--replica", "all"], grant="all")
        elif then == "rerun":
            self.door_cmd("rerun", ["rollout", "gpu02", "--tag", TAG, "--yes"])
        elif run:
            self.door_cmd(then, ["resume", run["run_id"], "--yes"] + (["--retry"] if then == "retry" else []))

    def door_journals(self, a: dict[str, Any]) -> None:
        from orchestrator_sim import BASE_TARGET_TAG
        from orchestrator_sim.explore.common import TAG

        other = self.dir / "other-journal"
        other.mkdir(exist_ok=True)
        host = a["host"]
        tag = TAG if host == "gpu02" else BASE_TARGET_TAG
        over = [] if host == "gpu02" else ["--override-prerequisite", "gpu02", "--soak", "0"]
        args = ["rollout", host, "--tag", tag, "--yes", *over]
        cmd, proc = self.door_cmd("rollout", args, background=True)
        kind, k = a["trigger"]
        t0 = time.monotonic()
        while proc.poll() is None and time.monotonic() - t0 < 120:
            with self.fleet.recorder._lock:
                muts = [c for c in self.fleet.recorder._calls if c.is_mutating]
            if len(muts) >= k and (kind == "mut" or muts[k - 1].finished_at is not None):
                break
            time.sleep(0.005)
        self.door_cmd("rollout (another journal)", args, state=other)
        self.finish(cmd, proc)

    def door_preview(self, a: dict[str, Any]) -> None:
        from orchestrator_sim.explore.common import TAG

        self.door_cmd("plan --live", ["plan", "gpu02", "--tag", TAG, "--live"])
        self.door_cmd("rollout", ["rollout", "gpu02", "--tag", TAG, "--yes"])
