"""compose-manager's docker compose as deployed at commit 8e07c35, simulated: request validation
in the server's order, the tag gate, the single operation lock, the action log and the deploy
record, the server's work-dir copies of the files, planning (the exact --remove-orphans rule), and
the up/down scripts that run on the host's event queue while their output streams out.

This module holds the requests' side (validation, the lock, the tag gate, `/version`, `/status`,
the attestation, the host reads): `ComposeOperations`. Planning is plan.py's, the up/down
scripts and the records they leave scripts.py's; the requests' records records.py's.

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
from datetime import timedelta
from typing import Any

from orchestrator_sim.compose_manager.interpolation import InterpolationError
from orchestrator_sim.compose_manager.plan import PlanItem  # noqa: F401 - re-exported
from orchestrator_sim.compose_manager.records import (  # noqa: F401 - re-exported (host/sim_host.py, apps)
    ComposeRequest,
    Operation,
    OrphanRemoval,
    WorkCopy,
)
from orchestrator_sim.compose_manager.repo import TagInfo, load_compose, sha256_text
from orchestrator_sim.compose_manager.scripts import ComposeScripts
from orchestrator_sim.faults import SIDECAR_DOWN_BUSY_S
from orchestrator_sim.host.containers import CONFIG_DIR, PROJECT
from orchestrator_sim.record.calls import RecordedCall

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


class ComposeOperations(ComposeScripts):
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
            held = self._other_holder()
            if op is None and held is not None:
                out["in_flight"] = {k: v for k, v in held.items() if k != "dry_run"}
                self._spend_other_holder()
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
        if req is not None and self._sidecar_down_busy(req):
            raise ComposeError(409, "another docker operation is already in progress: compose_up")
        if self.faults.take("busy-409"):
            raise ComposeError(409, "another docker operation is already in progress: docker_restart")
        if self._op is not None:
            raise ComposeError(409, f"another docker operation is already in progress: {self._op.action}")
        if self._other_holder() is not None:
            self._spend_other_holder()
            raise ComposeError(409, "another docker operation is already in progress: compose_up")

    def _other_holder(self) -> dict[str, Any] | None:
        """The operation of another client that holds the lock now (`lock-after-down`), or None. It
        ends after its count of lock calls refused and `GET /status` answers naming it, so a test
        meets it whatever the timing, or LOCK_AFTER_DOWN_HOLD_S simulated seconds after it began,
        whichever comes first: another client's dry run holds the lock for a bounded time, so on a
        slow machine (more simulated time per call) it never outlasts the runbook's `timeouts.gone`."""
        if self._held_by_other is not None and self._now >= self._held_by_other[1]:
            self._held_by_other = None
        return self._held_by_other[2] if self._held_by_other is not None else None

    def _spend_other_holder(self) -> None:
        if self._held_by_other is not None:
            left, until, holder = self._held_by_other
            self._held_by_other = (left - 1, until, holder) if left > 1 else None

    def _down_busy(self, req: ComposeRequest) -> bool:
        """`down-busy:rN`: a down naming a running engine of slot rN is refused while the count lasts."""
        slots = {c.slot for c in self._containers.values()
                 if c.service in req.services and c.project == req.project and c.slot is not None and c.state == "running"}
        return bool(slots) and self.faults.take_for("down-busy", slots)

    def _sidecar_down_busy(self, req: ComposeRequest) -> bool:
        """`sidecar-down-busy:rN`: once slot rN runs a target-file engine this simulation started, a
        down naming no engine is refused for SIDECAR_DOWN_BUSY_S simulated seconds from the first."""
        slot = next((s.replica for s in self.faults.specs if s.name == "sidecar-down-busy"), None)
        if slot is None or any(c.engine is not None for c in self._containers.values() if c.service in req.services):
            return False
        if self._sidecar_busy_since is None:
            if not any(c.slot == slot and c.file == self.target_file and c.created_at >= 0 and c.state == "running"
                       for c in self._containers.values()):
                return False
            self._sidecar_busy_since = self._now
        return self._now < self._sidecar_busy_since + SIDECAR_DOWN_BUSY_S

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
