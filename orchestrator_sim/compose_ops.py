"""compose-manager's docker compose, simulated: request validation, the tag gate, the single
operation lock, planning (the exact --remove-orphans rule), and the up/down scripts that run on the
host's event queue while their output streams out."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Generator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from orchestrator_sim.compose_repo import NGINX_SERVICE, TARGET_FILE, ComposeFile, load_compose
from orchestrator_sim.containers import PROJECT, Container
from orchestrator_sim.host_core import ORPHAN_STOP_TIMEOUT_S, HostCore
from orchestrator_sim.interpolation import InterpolationError
from orchestrator_sim.recording import RecordedCall

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PROJECT = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


class ComposeError(Exception):
    """A compose-manager request refused before any docker command ran (HTTP status + message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class OrphanRemoval:
    at: float
    container: str
    service: str
    by_file: str
    by_tag: str
    stop_timeout_s: float
    call_seq: int | None


@dataclass
class ComposeRequest:
    tag: str
    file: str
    project: str
    services: list[str]
    env: dict[str, str]
    force_recreate: bool
    dry_run: bool


@dataclass
class Operation:
    action: str  # compose_up | compose_down
    request: ComposeRequest
    call: RecordedCall | None
    lines: list[tuple[str, str]] = field(default_factory=list)  # (event, data)
    done: bool = False
    success: bool = False
    exit_code: int = 0
    cut: bool = False
    effects: list[str] = field(default_factory=list)


@dataclass
class PlanItem:
    service: str
    container: str
    action: str  # Created | Recreated | Started | Running | Removed
    extra: bool = False  # added by a fault


class ComposeOperations(HostCore):
    """The compose-manager side of the host (mixed into SimHost)."""

    def version(self) -> dict[str, Any]:
        with self._lock:
            last = self._last_up or {}
            return {
                "status": "ok",
                "tag": last.get("tag"),
                "commit": last.get("commit"),
                "file": last.get("file"),
                "file_sha256": last.get("file_sha256"),
            }

    def attestation(self, nonce: str) -> dict[str, Any]:
        with self._lock:
            actions = self.action_log()
        canon = json.dumps(actions, sort_keys=True, separators=(",", ":"))
        actions_hash = hashlib.sha256(canon.encode()).hexdigest()
        quote = "SIMULATED-TDX-QUOTE:" + hashlib.sha256((nonce + actions_hash).encode()).hexdigest()
        return {
            "actions": actions,
            "actions_hash": actions_hash,
            "nonce": nonce,
            "quote": quote,
            "event_log": [],
            "vm_config": {"simulated": True},
        }

    def action_log(self) -> list[dict[str, Any]]:
        with self._lock:
            return json.loads(json.dumps(self._actions))

    def orphan_removals(self) -> list[OrphanRemoval]:
        with self._lock:
            return list(self._orphans)

    def busy(self) -> str | None:
        with self._lock:
            self.sync()
            return self._op.action if self._op else None

    def parse_request(self, body: Any, *, down: bool) -> ComposeRequest:
        if not isinstance(body, dict):
            raise ComposeError(400, "invalid request body: expected a JSON object")
        tag, file = body.get("tag"), body.get("file")
        if not isinstance(tag, str) or not tag:
            raise ComposeError(400, "tag is required")
        if not isinstance(file, str) or not file:
            raise ComposeError(400, "file is required")
        project = body.get("project") or PROJECT
        if not isinstance(project, str) or not _PROJECT.match(project):
            raise ComposeError(400, "invalid project name")
        services = body.get("services") or []
        if not isinstance(services, list) or not all(isinstance(s, str) and s for s in services):
            raise ComposeError(400, "services must be a list of service names")
        env = body.get("env") or {}
        if not isinstance(env, dict):
            raise ComposeError(400, "env must be an object of strings")
        for key, value in env.items():
            if not _ENV_KEY.match(str(key)):
                raise ComposeError(400, f"invalid env key: {key!r}")
            if not isinstance(value, str):
                raise ComposeError(400, f"invalid env value for {key}: must be a string")
            if "\n" in value or "\r" in value:
                raise ComposeError(400, f"invalid env value for {key}: must not contain newlines")
        for flag in ("force_recreate", "dry_run", "volumes"):
            if flag in body and not isinstance(body[flag], bool):
                raise ComposeError(400, f"{flag} must be a boolean")
        return ComposeRequest(
            tag=tag,
            file=file,
            project=project,
            services=list(services),
            env=dict(env),
            force_recreate=bool(body.get("force_recreate", False)),
            dry_run=False if down else bool(body.get("dry_run", False)),
        )

    def _load_for(self, req: ComposeRequest) -> tuple[ComposeFile | None, str | None]:
        info = self.repo.tag(req.tag)
        if info is None:
            raise ComposeError(400, f"tag not found: {req.tag}")
        committed = self.epoch - timedelta(hours=info.age_hours)
        if self.wall() - committed < timedelta(hours=self.repo.min_tag_age_hours):
            raise ComposeError(
                400,
                f"tag too recent: {committed.strftime('%Y-%m-%dT%H:%M:%SZ')} is less "
                f"than {self.repo.min_tag_age_hours:g} hours old",
            )
        text = self.repo.file_text(req.tag, req.file)
        if text is None:
            raise ComposeError(400, f"file not found at tag {req.tag}: {req.file}")
        try:
            return load_compose(text, req.env, path=req.file, tag=req.tag, commit=info.commit), None
        except InterpolationError as exc:
            return None, f"error while interpolating: {exc}"

    def _take_lock(self) -> None:
        if self.faults.take("busy-409"):
            raise ComposeError(409, "another docker operation is already in progress: docker_restart")
        if self._op is not None:
            raise ComposeError(409, f"another docker operation is already in progress: {self._op.action}")

    def begin_up(self, body: Any, call: RecordedCall | None = None) -> Operation:
        with self._lock:
            self.sync()
            req = self.parse_request(body, down=False)
            cf, error = self._load_for(req)
            self._take_lock()
            op = Operation(action="compose_up", request=req, call=call)
            self._op = op
            self._drive(op, self._up_script(op, cf, error))
            return op

    def begin_down(self, body: Any, call: RecordedCall | None = None) -> Operation:
        with self._lock:
            self.sync()
            req = self.parse_request(body, down=True)
            cf, error = self._load_for(req)
            self._take_lock()
            op = Operation(action="compose_down", request=req, call=call)
            self._op = op
            self._drive(op, self._down_script(op, cf, error))
            return op

    def op_snapshot(self, op: Operation, start: int) -> tuple[list[tuple[str, str]], bool, bool]:
        with self._lock:
            self.sync()
            return op.lines[start:], op.done, op.cut

    # -- driving a script on the event queue
    def _drive(self, op: Operation, script: Generator[float, None, None]) -> None:
        try:
            delay = next(script)
        except StopIteration:
            if not op.done and not op.cut:
                self._finish(op, True, 0)
            return
        self._schedule(delay, self._drive, op, script)

    def _emit(self, op: Operation, line: str, event: str = "stderr") -> None:
        op.lines.append((event, line))

    def _finish(self, op: Operation, success: bool, code: int) -> None:
        op.done, op.success, op.exit_code = True, success, code
        if self._op is op:
            self._op = None
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
        self, action: str, cf: ComposeFile, services: list[str], at: float | None = None
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "timestamp": self.wall(at).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "action": action,
            "tag": cf.tag,
            "commit": cf.commit,
            "file": cf.path,
            "file_sha256": cf.sha256,
        }
        if services:
            entry["services"] = list(services)
        return entry

    def _record_action(self, action: str, cf: ComposeFile, req: ComposeRequest) -> None:
        entry = self._action_entry(action, cf, req.services)
        self._actions.append(entry)
        if action == "compose_up":
            self._last_up = entry

    def _warnings(self, op: Operation, cf: ComposeFile) -> None:
        ts = self.wall().strftime("%Y-%m-%dT%H:%M:%SZ")
        for name in cf.unset_variables:
            self._emit(
                op,
                f'time="{ts}" level=warning msg="The \\"{name}\\" variable is not set. Defaulting to a blank string."',
            )

    # -- planning
    def _plan(self, cf: ComposeFile, req: ComposeRequest) -> tuple[list[PlanItem], list[Container], str | None]:
        names = req.services or cf.default_services()
        for n in names:
            if n not in cf.services:
                return [], [], f"no such service: {n}"
        items: list[PlanItem] = []
        for name in cf.closure(names):
            sd = cf.services[name]
            c = self._containers.get(sd.container_name)
            if c is not None and c.project != req.project:
                return (
                    [],
                    [],
                    (
                        f'Error response from daemon: Conflict. The container name "/{c.name}" is '
                        f'already in use by container "{c.id}". You have to remove (or rename) that '
                        f"container to be able to reuse that name."
                    ),
                )
            if c is not None and c.state in ("removing", "dead"):
                return [], [], f"Error response from daemon: removal of container {c.name} is already in progress"
            if c is None:
                action = "Created"
            elif req.force_recreate or c.config_hash != sd.config_hash:
                action = "Recreated"
            elif c.state in ("running", "restarting"):
                action = "Running"
            else:
                action = "Started"
            items.append(PlanItem(name, sd.container_name, action))
        orphans = sorted(
            (c for c in self._containers.values() if c.project == req.project and c.service not in cf.services),
            key=lambda c: c.name,
        )
        if cf.path == TARGET_FILE:
            planned = {i.service for i in items}
            nginx = self._containers.get(NGINX_SERVICE)
            if self.faults.active("dry-run-extra-recreate") and NGINX_SERVICE not in planned and nginx:
                items.append(PlanItem(NGINX_SERVICE, nginx.name, "Recreated", extra=True))
            r1 = self._containers.get("model-sg-glm53-w4afp8-tp4-r1")
            if (
                self.faults.active("dry-run-extra-remove")
                and "model-sg-glm53-w4afp8-tp4-r1" not in planned
                and r1 is not None
                and r1 not in orphans
            ):
                orphans.append(r1)
        return items, orphans, None

    def _dry_run_lines(self, items: list[PlanItem], orphans: list[Container]) -> list[str]:
        rows = [("Network dstack_default", "Created")]
        rows += [(f"Container {c.name}", "Removed") for c in orphans]
        rows += [(f"Container {i.container}", i.action) for i in items]
        width = max(len(r) for r, _ in rows)
        out = [f"[+] Running {len(rows)}/{len(rows)}"]
        out += [f" ✔ DRY-RUN MODE -  {r:<{width}}  {s:<9}  0.0s" for r, s in rows]
        return out

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
        if req.dry_run:
            for line in self._dry_run_lines(items, orphans):
                self._emit(op, line)
                yield 0.05
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
            stops = []
            for c in orphans:
                self._emit(op, f" Container {c.name}  Stopping")
                stops.append((c, *self._begin_stop(c, ORPHAN_STOP_TIMEOUT_S)))
            yield max(d for _, d, _ in stops)
            for c, _, code in stops:
                self._finish_stop(c, code)
                self._emit(op, f" Container {c.name}  Stopped")
                self._emit(op, f" Container {c.name}  Removing")
                self._remove(c)
                self._emit(op, f" Container {c.name}  Removed")
                op.effects.append(f"orphan-removed:{c.name}")
                self._orphans.append(
                    OrphanRemoval(
                        at=self._now,
                        container=c.name,
                        service=c.service,
                        by_file=cf.path,
                        by_tag=cf.tag,
                        stop_timeout_s=ORPHAN_STOP_TIMEOUT_S,
                        call_seq=op.call.seq if op.call else None,
                    )
                )
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
        self._record_action("compose_up", cf, req)
        if self.faults.take_once("cut-after-effect"):
            self._cut(op, "after-effect")
            return
        self._finish(op, True, 0)

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
            self._record_action("compose_down", cf, req)
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
        self._record_action("compose_down", cf, req)
        self._finish(op, True, 0)
