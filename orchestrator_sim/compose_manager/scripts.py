"""compose-manager's up and down scripts on the simulated host: generators that yield the
simulation seconds to wait, driven on the host's event queue while their output streams out (the
docker compose lines, the orphan removals, the action log and deploy record on success)."""

from __future__ import annotations

import hashlib
from collections.abc import Generator
from typing import Any

from orchestrator_sim.compose_manager.plan import ComposePlanning, PlanItem
from orchestrator_sim.compose_manager.records import ComposeRequest, Operation, OrphanRemoval, WorkCopy
from orchestrator_sim.compose_manager.repo import ComposeFile
from orchestrator_sim.faults import LOCK_AFTER_DOWN_HOLD_S
from orchestrator_sim.host.containers import Container
from orchestrator_sim.host.core import ORPHAN_STOP_TIMEOUT_S


class ComposeScripts(ComposePlanning):
    """Running an accepted up or down (mixed into SimHost through ComposeOperations)."""

    # -- driving a script on the event queue
    def _drive(self, op: Operation, script: Generator[float, None, None]) -> None:
        try:
            delay = next(script)
        except StopIteration:
            if not op.done and not op.cut:
                self._finish(op, True, 0)
            self._note_domain_serving()
            return
        self._schedule(delay, self._drive, op, script)
        self._note_domain_serving()  # a first step may have stopped something already

    def _emit(self, op: Operation, line: str, event: str = "stderr") -> None:
        op.lines.append((event, line))

    def _finish(self, op: Operation, success: bool, code: int) -> None:
        op.done, op.success, op.exit_code = True, success, code
        if self._op is op:
            self._op = None
        if success and op.action == "compose_up" and not op.request.dry_run:
            self._record_success(op.request)
        if success and op.action == "compose_down":
            refusals = self.faults.count_of("lock-after-down")
            if refusals:  # another client (the dashboard, an operator's dry run) takes the lock at once
                self._held_by_other = (refusals, self._now + LOCK_AFTER_DOWN_HOLD_S, {
                    "action": "compose_up", "started_at": self.stamp(), "tag": op.request.tag,
                    "file": op.request.file, "services": [], "dry_run": True})
        if op.call is not None and self.recorder is not None:
            self.recorder.update(
                op.call, outcome="done:ok" if success else f"done:failed({code})", effects=list(op.effects)
            )

    def _cut(self, op: Operation, when: str) -> None:
        op.cut = True
        if self._op is op:
            self._op = None
        if op.call is not None and self.recorder is not None:
            self.recorder.update(op.call, outcome=f"cut:{when}", effects=list(op.effects))

    def _action_entry(
        self, action: str, *, tag: str, commit: str | None, file: str, sha256: str | None, services: list[str], at: float | None = None
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {"timestamp": self.stamp(at), "action": action, "tag": tag}
        if commit is not None:
            entry["commit"] = commit
        entry["file"] = file
        if sha256 is not None:
            entry["file_sha256"] = sha256
        if services:
            entry["services"] = list(services)
        return entry

    def _record_action(self, action: str, req: ComposeRequest, copy: WorkCopy | None) -> dict[str, Any]:
        """Appended when the request is accepted, before docker runs, whatever the outcome."""
        entry = self._action_entry(
            action,
            tag=req.tag,
            commit=copy.commit if copy else None,
            file=req.file,
            sha256=copy.sha256 if copy else None,
            services=req.services,
        )
        self._actions.append(entry)
        return entry

    def _record_success(self, req: ComposeRequest) -> None:
        """`projects[p].current/previous`: written only after an up's stream ended in success."""
        copy = self._work_dir.get(req.file)
        record = {"tag": req.tag, "commit": copy.commit if copy else None, "file": req.file,
                  "file_sha256": copy.sha256 if copy else None}
        record = {k: v for k, v in record.items() if v is not None}
        slot = self._deployed.setdefault(req.project, {})
        if slot.get("current"):
            slot["previous"] = slot["current"]
        slot["current"] = record

    def _warnings(self, op: Operation, cf: ComposeFile) -> None:
        ts = self.wall().strftime("%Y-%m-%dT%H:%M:%SZ")
        for name in cf.unset_variables:
            self._emit(
                op,
                f'time="{ts}" level=warning msg="The \\"{name}\\" variable is not set. Defaulting to a blank string."',
            )

    # -- scripts (generators yielding simulation seconds to wait)
    def _up_script(self, op: Operation, cf: ComposeFile | None, error: str | None) -> Generator[float, None, None]:
        req = op.request
        if cf is None:
            self._emit(op, error or "error")
            self._finish(op, False, 1)
            return
        self._warnings(op, cf)
        items, orphans, plan_error = self._plan(cf, req)
        if plan_error:
            self._emit(op, plan_error)
            self._finish(op, False, 1)
            return
        if req.dry_run and self.faults.active("dry-run-recreates") and any(i.action == "Recreated" for i in items):
            # docker/compose#14029: `up -d --dry-run` that needs a recreate performs the real
            # swap (and compose-manager's --remove-orphans with it), printed without the
            # DRY-RUN prefix; the server still takes it for a dry run (no action, no success record)
            yield from self._dry_run_for_real(op, cf, req, items, orphans)
            op.plan = self._plan_event(items, orphans)
            self._finish(op, True, 0)
            return
        if req.dry_run:
            for line in self._dry_run_lines(items, orphans, req.project):
                self._emit(op, line)
                yield 0.05
            op.plan = self._plan_event(items, orphans)
            if self.faults.active("dry-run-not-dry"):
                # docker/compose#14029: the "dry run" really performs what it planned.
                for item in items:
                    if item.action in ("Created", "Recreated"):
                        yield from self._apply_item(op, cf, req, item, quiet=True)
                        op.effects.append(f"dry-run-changed:{item.container}")
                for item in items:
                    if item.action in ("Created", "Recreated"):
                        c = self._containers.get(item.container)
                        if c is not None and c.state == "created":
                            self._start(c)
            self._finish(op, True, 0)
            return
        # pull
        for name in cf.closure(req.services or cf.default_services()):
            image = cf.services[name].image
            self._emit(op, f" {name} Pulling ")
            yield 1.0 if image in self._images else 45.0
            self._images.add(image)
            self._emit(op, f" {name} Pulled ")
        if self.faults.take_once("cut-before-effect"):
            self._cut(op, "before-effect")
            return
        # orphans (and a fault's extra removal) with a plain 10 s stop
        if orphans:
            yield from self._remove_orphans(op, cf, orphans, effect="orphan-removed", steps=("Stopped", "Removing"))
            yield 0.5
        # create / recreate
        for item in items:
            if item.action in ("Created", "Recreated"):
                yield from self._apply_item(op, cf, req, item, quiet=False)
        # start, dependencies first
        for item in items:
            sd = cf.services[item.service]
            c = self._containers.get(item.container)
            if item.action == "Running" or c is None:
                self._emit(op, f" Container {item.container}  Running")
                continue
            for dep, cond in sd.depends_on.items():
                dc = self._containers.get(cf.services[dep].container_name) if dep in cf.services else None
                if cond != "service_completed_successfully" or dc is None:
                    continue
                self._emit(op, f" Container {dc.name}  Waiting")
                while dc.state in ("running", "created"):
                    yield 1.0
                if dc.exit_code != 0:
                    self._emit(op, f'service "{dep}" didn\'t complete successfully: exit {dc.exit_code}')
                    self._finish(op, False, 1)
                    return
                self._emit(op, f" Container {dc.name}  Exited")
            if c.state in ("running", "restarting"):
                self._emit(op, f" Container {c.name}  Running")
                continue
            self._emit(op, f" Container {c.name}  Starting")
            yield 0.5
            self._start(c)
            self._emit(op, f" Container {c.name}  Started")
        if self.faults.take_once("cut-after-effect"):
            self._cut(op, "after-effect")
            return
        self._finish(op, True, 0)

    def _dry_run_for_real(
        self, op: Operation, cf: ComposeFile, req: ComposeRequest, items: list[PlanItem], orphans: list[Container]
    ) -> Generator[float, None, None]:
        """The `dry-run-recreates` fault: what a real `up -d --remove-orphans` of the request does,
        orphans included, with plain (unprefixed) progress lines."""
        if orphans:
            yield from self._remove_orphans(op, cf, orphans, effect="dry-run-orphan-removed", steps=())
        for item in items:
            if item.action in ("Created", "Recreated"):
                yield from self._apply_item(op, cf, req, item, quiet=False)
                op.effects.append(f"dry-run-changed:{item.container}")
        for item in items:
            c = self._containers.get(item.container)
            if item.action in ("Created", "Recreated") and c is not None and c.state == "created":
                self._emit(op, f" Container {c.name}  Starting")
                yield 0.5
                self._start(c)
                self._emit(op, f" Container {c.name}  Started")

    def _remove_orphans(self, op: Any, cf: Any, orphans: list[Any], *, effect: str,
                        steps: tuple[str, ...]) -> Generator[float, None, None]:
        """Stop (plain 10 s stop) and remove `orphans`, as `up --remove-orphans` does; `steps`: the
        progress lines between Stopping and Removed (a dry run made real prints fewer)."""
        stops = []
        for c in orphans:
            self._emit(op, f" Container {c.name}  Stopping")
            stops.append((c, *self._begin_stop(c, ORPHAN_STOP_TIMEOUT_S)))
        yield max(d for _, d, _ in stops)
        for c, _, code in stops:
            self._finish_stop(c, code)
            for word in steps:
                self._emit(op, f" Container {c.name}  {word}")
            self._remove(c)
            self._emit(op, f" Container {c.name}  Removed")
            op.effects.append(f"{effect}:{c.name}")
            self._record_orphan(op, cf, c)

    def _record_orphan(self, op: Any, cf: Any, c: Any) -> None:
        """An orphan removed by an up (or by a dry run made real, docker/compose#14029): the record
        the invariants read."""
        self._orphans.append(OrphanRemoval(at=self._now, container=c.name, service=c.service, by_file=cf.path,
                                           by_tag=cf.tag, stop_timeout_s=ORPHAN_STOP_TIMEOUT_S,
                                           call_seq=op.call.seq if op.call else None))

    def _apply_item(
        self, op: Operation, cf: ComposeFile, req: ComposeRequest, item: PlanItem, *, quiet: bool
    ) -> Generator[float, None, None]:
        sd = cf.services[item.service]
        old = self._containers.get(item.container)
        if item.action == "Recreated" and old is not None:
            if not quiet:
                self._emit(op, f" Container {item.container}  Recreate")
            delay, code = self._begin_stop(old, sd.stop_grace_s)
            yield delay
            self._finish_stop(old, code)
            self._remove(old)
        elif not quiet:
            self._emit(op, f" Container {item.container}  Creating")
        yield 0.3
        c = self._new_container(sd, cf, req.project, created_at=self._now)
        self._containers[c.name] = c
        if not quiet:
            self._emit(op, f" Container {item.container}  {'Recreated' if item.action == 'Recreated' else 'Created'}")

    def _down_script(self, op: Operation, cf: ComposeFile | None, error: str | None) -> Generator[float, None, None]:
        req = op.request
        if cf is None:
            self._emit(op, error or "error")
            self._finish(op, False, 1)
            return
        self._warnings(op, cf)
        names = req.services or list(cf.order)
        for n in names:
            if n not in cf.services:
                self._emit(op, f"no such service: {n}")
                self._finish(op, False, 1)
                return
        targets = [
            c
            for n in names
            if (c := self._containers.get(cf.services[n].container_name)) is not None and c.project == req.project
        ]
        if not targets:
            self._emit(op, f'Warning: No resource found to remove for project "{req.project}".')
            self._finish(op, True, 0)
            return
        stops = []
        for c in targets:
            if c.state in ("removing", "dead"):
                continue
            self._emit(op, f" Container {c.name}  Stopping")
            stops.append((c, *self._begin_stop(c, cf.services[c.service].stop_grace_s)))
        if stops:
            yield max(d for _, d, _ in stops)
        failed = False
        for c in targets:
            stop = next((s for s in stops if s[0] is c), None)
            if stop is not None:
                self._finish_stop(c, stop[2])
                self._emit(op, f" Container {c.name}  Stopped")
            self._emit(op, f" Container {c.name}  Removing")
            if stop is not None and self.faults.take_once("zombie-after-down"):
                c.state = "removing"
                c.run += 1
                layer = hashlib.sha256(c.id.encode()).hexdigest()
                self._emit(
                    op,
                    f'Error response from daemon: container {c.id}: driver "overlay2" failed to '
                    f"remove root filesystem: unlinkat /var/lib/docker/overlay2/{layer}/merged: "
                    "device or resource busy",
                )
                op.effects.append(f"zombie:{c.name}")
                failed = True
                continue
            self._remove(c)
            self._emit(op, f" Container {c.name}  Removed")
        yield 0.2
        if failed:
            self._finish(op, False, 1)
            return
        self._finish(op, True, 0)
