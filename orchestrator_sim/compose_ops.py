"""compose-manager's docker compose as deployed at commit 8e07c35, simulated: request validation
in the server's order, the tag gate, the single operation lock, the action log and the deploy
record, the server's work-dir copies of the files, planning (the exact --remove-orphans rule), and
the up/down scripts that run on the host's event queue while their output streams out.

Rules kept from the real server (`compose-manager-as-deployed.md`, recorded exchanges):
- Body shape errors (missing `tag`, a non-boolean flag, a wrong type) are axum's 422 text/plain,
  before anything else. Then the lock is taken FIRST (a 409 can precede a 400), then the project
  (`work`/`dstack` reserved), the tag (GitHub), the file at the tag and the env are checked; a
  refusal releases the lock.
- An accepted non-dry up is recorded (action log + `/version` top level, the last ATTEMPT) before
  docker runs, whatever the outcome; `projects[p].current/previous` move only after an up's stream
  ended in success. A dry run is not recorded. An accepted down is recorded too.
- An up or dry run writes the file fetched at the tag to the work dir; logs and down read that
  copy (a down never fetches the file: a path never fetched fails inside the stream).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Generator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from orchestrator_sim.compose_repo import TagInfo, sha256_text
from orchestrator_sim.compose_repo import NGINX_SERVICE, TARGET_FILE, ComposeFile, load_compose
from orchestrator_sim.compose_records import ComposeRequest, Operation, OrphanRemoval  # noqa: F401 - re-exported (host.py, apps)
from orchestrator_sim.containers import CONFIG_DIR, PROJECT, Container
from orchestrator_sim.host_core import ORPHAN_STOP_TIMEOUT_S, HostCore
from orchestrator_sim.interpolation import InterpolationError
from orchestrator_sim.recording import RecordedCall

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PROJECT = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
RESERVED_PROJECTS = frozenset({PROJECT, "dstack"})
DEFAULT_FILE = "docker-compose.yml"
#: What the compose-manager container runs as (a simulated digest, same shape as the real one).
IMAGE = "nearaidev/compose-manager@sha256:" + hashlib.sha256(b"orchestrator-sim compose-manager 8e07c35").hexdigest()
_DESERIALIZE = "Failed to deserialize the JSON body into the target type: "


class ComposeError(Exception):
    """A compose-manager request refused before any docker command ran (HTTP status + message).
    `plain`: axum's text/plain rejection (422) rather than the JSON error envelope."""

    def __init__(self, status: int, message: str, *, plain: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.plain = plain


@dataclass(frozen=True)
class WorkCopy:
    """The server's copy of one repository file in its work dir (written by an up or dry run)."""

    path: str
    tag: str
    commit: str
    text: str
    sha256: str


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return f"boolean `{str(value).lower()}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value}`"
    if isinstance(value, str):
        return f"string {json.dumps(value)}"
    if value is None:
        return "null"
    return "sequence" if isinstance(value, list) else "map"


def _column(raw: str, key: str | None) -> int:
    """serde_json's column for an error about `key` (end of its value), else the body's end."""
    if key is not None:
        at = raw.find(f'"{key}"')
        if at >= 0:
            colon = raw.find(":", at) + 1
            while colon < len(raw) and raw[colon] in " \t":
                colon += 1
            try:
                _, end = json.JSONDecoder().raw_decode(raw, colon)
                return end
            except ValueError:
                pass
    return len(raw.rstrip())


@dataclass
class PlanItem:
    service: str
    container: str
    action: str  # Created | Recreated | Started | Running | Removed
    extra: bool = False  # added by a fault


class ComposeOperations(HostCore):
    """The compose-manager side of the host (mixed into SimHost)."""

    def version(self) -> dict[str, Any]:
        """`GET /version`: top level = last attempted up, `projects[p]` = last successful ups;
        unset keys omitted."""
        with self._lock:
            out: dict[str, Any] = {"status": "ok"}
            for key in ("tag", "commit", "file", "file_sha256"):
                if self._last_up and self._last_up.get(key) is not None:
                    out[key] = self._last_up[key]
            out["image"] = IMAGE
            projects = {
                name: {k: dict(v) for k, v in (("current", rec.get("current")), ("previous", rec.get("previous"))) if v}
                for name, rec in self._deployed.items()
            }
            if projects:
                out["projects"] = projects
            return out

    def status(self) -> dict[str, Any]:
        """`GET /status`: the mutating operation holding the lock, if any (`in_flight` omitted when idle)."""
        with self._lock:
            self.sync()
            out: dict[str, Any] = {"status": "ok"}
            op = self._op
            if op is not None:
                out["in_flight"] = {
                    "action": op.action,
                    "started_at": op.started_at,
                    "tag": op.request.tag,
                    "file": op.request.file,
                    "services": list(op.request.services),
                }
            return out

    def attestation(self, nonce: str | None) -> dict[str, Any]:
        """The report as 8e07c35 serves it (no auth). Without a nonce the server draws one."""
        with self._lock:
            actions = self.action_log()
            source = "client"
            if nonce is None:
                nonce, source = "".join(self.rng.choice("0123456789abcdef") for _ in range(64)), "server"
        if self.faults.active("attestation-file-mismatch"):  # the attested files are not the tags'
            for entry in actions:
                if entry.get("action") == "compose_up" and entry.get("file_sha256"):
                    entry["file_sha256"] = hashlib.sha256(b"another file").hexdigest()
        canon = json.dumps(actions[:-1] if self.faults.active("attestation-stale") else actions, separators=(",", ":"))
        actions_hash = hashlib.sha256(canon.encode()).hexdigest()
        report_data = actions_hash + hashlib.sha256(bytes.fromhex(nonce) if len(nonce) % 2 == 0 else nonce.encode()).hexdigest()
        quote = "04000200" + hashlib.sha256(b"simulated td quote").hexdigest() * 4 + report_data
        return {
            "actions": actions,
            "actions_hash": actions_hash,
            "nonce": nonce,
            "nonce_source": source,
            "quote": quote,
            "event_log": json.dumps([{"imr": 3, "event": "compose-manager", "digest": actions_hash}]),
            "report_data": report_data,
            "vm_config": json.dumps({"os_image_hash": hashlib.sha256(b"sim-os").hexdigest(), "cpu_count": 96}),
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

    def work_copy(self, path: str) -> WorkCopy | None:
        with self._lock:
            return self._work_dir.get(path)

    def parse_request(self, body: Any, raw: str = "", *, down: bool) -> ComposeRequest:
        """What axum's `Json<ComposeRequest>` extractor accepts; refusals are 422 text/plain."""
        if not isinstance(body, dict):
            raise ComposeError(
                422, f"{_DESERIALIZE}invalid type: {_json_type(body)}, expected struct ComposeRequest at line 1 column {_column(raw, None)}", plain=True
            )
        if "tag" not in body:
            raise ComposeError(422, f"{_DESERIALIZE}.: missing field `tag` at line 1 column {_column(raw, None)}", plain=True)
        for key in ("tag", "file", "project"):
            if key in body and not isinstance(body[key], str) and not (key != "tag" and body[key] is None):
                raise ComposeError(
                    422, f"{_DESERIALIZE}{key}: invalid type: {_json_type(body[key])}, expected a string at line 1 column {_column(raw, key)}", plain=True
                )
        services = body.get("services") or []
        if not isinstance(services, list) or not all(isinstance(x, str) for x in services):
            raise ComposeError(422, f"{_DESERIALIZE}services: invalid type: {_json_type(services)}, expected a string at line 1 column {_column(raw, 'services')}", plain=True)
        env = body.get("env") or {}
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise ComposeError(422, f"{_DESERIALIZE}env: invalid type, expected a string at line 1 column {_column(raw, 'env')}", plain=True)
        for flag in ("force_recreate", "dry_run", "volumes"):
            if flag in body and body[flag] is not None and not isinstance(body[flag], bool):
                raise ComposeError(
                    422, f"{_DESERIALIZE}{flag}: invalid type: {_json_type(body[flag])}, expected a boolean at line 1 column {_column(raw, flag)}", plain=True
                )
        return ComposeRequest(
            tag=body["tag"],
            file=body.get("file") or DEFAULT_FILE,
            project=body.get("project") or PROJECT,
            services=list(services),
            env=dict(env),
            force_recreate=bool(body.get("force_recreate") or False) and not self.faults.active("force-recreate-ignored"),
            dry_run=False if down else bool(body.get("dry_run") or False),
        )

    def _check_project(self, body: dict[str, Any]) -> None:
        project = body.get("project")
        if project is None:
            return
        if project in RESERVED_PROJECTS:
            raise ComposeError(400, f'compose project name "{project}" is reserved and cannot be overridden')
        if not _PROJECT.match(project):
            raise ComposeError(400, f"invalid compose project name: {project!r}")

    def _check_env(self, env: dict[str, str]) -> None:
        for key, value in env.items():
            if not _ENV_KEY.match(key):
                raise ComposeError(400, f"invalid env var key: '{key}' (must match [A-Za-z_][A-Za-z0-9_]*)")
            if "\n" in value or "\r" in value:
                raise ComposeError(400, f"env var '{key}' value must not contain newlines")

    def _fetch(self, req: ComposeRequest) -> tuple[TagInfo, str]:
        """The tag (GitHub) and the file at it, as the server resolves them; refusals are 400."""
        info = self.repo.tag(req.tag)
        if info is None or self.faults.active("github-down"):
            # 8e07c35 reports ANY non-success GitHub answer (rate limit, outage) this way.
            raise ComposeError(400, f"tag not found: {req.tag}")
        committed = self.epoch - timedelta(hours=info.age_hours)
        if self.repo.min_tag_age_hours > 0 and self.wall() - committed < timedelta(hours=self.repo.min_tag_age_hours):
            raise ComposeError(
                400,
                f"tag too recent: {committed.strftime('%Y-%m-%d %H:%M:%S')} UTC is less "
                f"than {self.repo.min_tag_age_hours:g} hours old",
            )
        text = self.repo.file_text(req.tag, req.file)
        if text is None:
            raise ComposeError(400, f"file '{req.file}' not found at tag '{req.tag}'")
        return info, text

    def _take_lock(self, req: ComposeRequest | None = None) -> None:
        if req is not None and self._down_busy(req):
            raise ComposeError(409, "another docker operation is already in progress: docker_restart")
        if self.faults.take("busy-409"):
            raise ComposeError(409, "another docker operation is already in progress: docker_restart")
        if self._op is not None:
            raise ComposeError(409, f"another docker operation is already in progress: {self._op.action}")

    def _down_busy(self, req: ComposeRequest) -> bool:
        """`down-busy:rN`: a down naming a running engine of slot rN is refused while the count lasts."""
        slots = {c.slot for c in self._containers.values()
                 if c.service in req.services and c.project == req.project and c.slot is not None and c.state == "running"}
        return bool(slots) and self.faults.take_for("down-busy", slots)

    def _accept(self, action: str, body: Any, raw: str, call: RecordedCall | None, *, down: bool) -> tuple[Operation, WorkCopy | None]:
        """Parse, take the lock, validate (releasing the lock on a refusal): the accepted operation."""
        req = self.parse_request(body, raw, down=down)
        self._take_lock(req if down else None)
        op = Operation(action=action, request=req, call=call, started_at=self.stamp())
        self._op = op
        try:
            self._check_project(body)
            if down:
                self._check_env(req.env)
                return op, self._work_dir.get(req.file)
            info, text = self._fetch(req)
            self._check_env(req.env)
        except ComposeError:
            self._op = None
            raise
        copy = WorkCopy(req.file, req.tag, info.commit, text, sha256_text(text))
        self._work_dir[req.file] = copy
        return op, copy

    def begin_up(self, body: Any, call: RecordedCall | None = None, raw: str = "") -> Operation:
        with self._lock:
            self.sync()
            op, copy = self._accept("compose_up", body, raw or json.dumps(body), call, down=False)
            assert copy is not None
            req = op.request
            if not req.dry_run:
                entry = self._record_action("compose_up", req, copy)
                self._last_up = entry
            try:
                cf = load_compose(copy.text, req.env, path=req.file, tag=req.tag, commit=copy.commit)
                error = None
            except InterpolationError as exc:
                cf, error = None, f"error while interpolating: {exc}"
            self._drive(op, self._up_script(op, cf, error))
            return op

    def begin_down(self, body: Any, call: RecordedCall | None = None, raw: str = "") -> Operation:
        with self._lock:
            self.sync()
            op, copy = self._accept("compose_down", body, raw or json.dumps(body), call, down=True)
            req = op.request
            self._record_action("compose_down", req, copy)
            cf, error = None, f"open {CONFIG_DIR}/{req.file}: no such file or directory"
            if copy is not None:
                try:
                    cf = load_compose(copy.text, req.env, path=req.file, tag=copy.tag, commit=copy.commit)
                    error = None
                except InterpolationError as exc:
                    error = f"error while interpolating: {exc}"
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

    # -- planning
    def _plan(self, cf: ComposeFile, req: ComposeRequest) -> tuple[list[PlanItem], list[Container], str | None]:
        names = req.services or cf.default_services()
        for n in names:
            if n not in cf.services:
                return [], [], f"no such service: {n}"
        items: list[PlanItem] = []
        forced = set(names) if req.force_recreate else set()  # --force-recreate: the named services, not their dependencies
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
            elif name in forced or c.config_hash != sd.config_hash or (
                not self.inline_configs_ignored and c.content_hash != sd.content_hash
            ):
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

    def _dry_run_lines(self, items: list[PlanItem], orphans: list[Container], project: str) -> list[str]:
        """docker compose's non-TTY dry-run output (what 8e07c35 streams): one line per step."""
        out: list[str] = []
        if not any(c.project == project for c in self._containers.values()):
            out += [f"Network {project}_default  Creating", f"Network {project}_default  Created"]
        for c in orphans:
            out += [f"Container {c.name}  {s}" for s in ("Stopping", "Stopped", "Removing", "Removed")]
        for i in items:
            if i.action == "Created":
                out += [f"Container {i.container}  Creating", f"Container {i.container}  Created"]
            elif i.action == "Recreated":
                out += [f"Container {i.container}  Recreate", f"Container {i.container}  Recreated"]
        starting = [i for i in items if i.action != "Running"]
        out += [f"Container {i.container}  Starting" for i in starting]
        out += [f"Container {i.container}  Running" for i in items if i.action == "Running"]
        out += [f"Container {i.container}  Started" for i in starting]
        return [f" DRY-RUN MODE -  {line}" for line in out]

    @staticmethod
    def _plan_event(items: list[PlanItem], orphans: list[Container]) -> dict[str, Any]:
        """The `{"event":"plan",...}` line 8e07c35 sends before a dry run's `done`."""
        return {
            "event": "plan",
            "exit_code": 0,
            "plan": {
                "create": [f"Container {i.container}" for i in items if i.action == "Created"],
                "recreate": [f"Container {i.container}" for i in items if i.action == "Recreated"],
                "remove": [f"Container {c.name}" for c in orphans],
                "unchanged": [f"Container {i.container}" for i in items if i.action in ("Running", "Started")],
            },
            "success": True,
        }

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

    # -- host reads (8e07c35: docker inspect + nvidia-smi, and the model-cache volumes)
    GPU_COUNT = 8
    GPU_MEMORY_MB = 143_771  # an H200's memory.total as nvidia-smi reports it

    def host_gpu(self) -> dict[str, Any]:
        """`GET /host/gpu`: per GPU index its memory, utilization and the containers holding it
        (the running containers whose service reserves that device id). The `gpus` envelope key
        is assumed; the per-GPU fields are the deployed doc's."""
        with self._lock:
            self.sync()
            gpus = []
            for index in range(self.GPU_COUNT):
                holders = sorted(
                    (c for c in self._containers.values() if str(index) in c.gpus and c.state in ("running", "restarting")),
                    key=lambda c: c.name,
                )
                used, util = 0, 0
                for c in holders:
                    if c.engine is not None:
                        used += 131_072 if c.engine.ready else 24_576
                        util = max(util, 37 if c.engine.ready else 100)
                gpus.append(
                    {
                        "index": index,
                        "memory_total_mb": self.GPU_MEMORY_MB,
                        "memory_used_mb": min(used, self.GPU_MEMORY_MB),
                        "utilization_pct": util,
                        "claimed_by": [c.name for c in holders],
                    }
                )
            return {"status": "ok", "gpus": gpus}

    def host_cache(self) -> dict[str, Any]:
        """`GET /host/cache`: the model-cache volumes and the weights they hold. The W4AFP8 weights
        are cached unless the `weights-missing` fault removed them."""
        weights = ["models--zai-org--GLM-5.3-Flash"]
        if not self.faults.active("weights-missing"):
            weights.insert(0, "models--graphistry--GLM-5.3-Flash-W4AFP8")
        size = 165 * 1024**3 * (len(weights) - 1) + 12 * 1024**3
        return {
            "status": "ok",
            "volumes": [
                {"name": f"{PROJECT}_huggingface_cache", "size_bytes": size},
                {"name": f"{PROJECT}_kernel_cache", "size_bytes": 3 * 1024**3},
            ],
            "weights": sorted(weights),
        }
