"""compose-manager's read answers at commit 8e07c35 (`compose-manager-as-deployed.md`) -> typed results.

The server omits unset keys: every field but the envelope is optional (absent: "not known"), and
extra keys are ignored (a newer server may add some). A field present with the wrong type
is a `ParseError`: better to stop than to act on a misread deploy record.

`/version`: the top-level `tag/commit/file/file_sha256` are the last **attempted** up (a failed up
shows there); `projects[p].current` / `previous` the last two **successful** ones, the only
possible rollback targets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.hosts.parsers import ParseError

DEFAULT_PROJECT = "work"

_RECORD_KEYS = ("tag", "commit", "file", "file_sha256")


def _opt_str(obj: Mapping[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ParseError(f"{where}.{key} is a {type(value).__name__}, expected text")
    return value


def _obj(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ParseError(f"{where} is a {type(value).__name__}, expected an object")
    return value


def _int(obj: Mapping[str, Any], key: str, where: str, *, optional: bool = False) -> int | None:
    value = obj.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ParseError(f"{where}.{key} is not an integer")
    return int(value)


@dataclass(frozen=True)
class DeployRecord:
    tag: str | None = None
    commit: str | None = None
    file: str | None = None
    file_sha256: str | None = None

    @classmethod
    def parse(cls, raw: Any, where: str) -> DeployRecord:
        obj = _obj(raw, where)
        return cls(**{k: _opt_str(obj, k, where) for k in _RECORD_KEYS})


@dataclass(frozen=True)
class ProjectVersions:
    """`projects[p]`: the last successful up (`current`) and the one before it (`previous`)."""

    current: DeployRecord | None = None
    previous: DeployRecord | None = None


class VersionInfo(dict[str, Any]):
    """`GET /version`, typed, and still the raw mapping (`info["tag"]`). `last_attempt` is the last
    ATTEMPTED up; `project(p).current` / `.previous` what actually deployed."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        super().__init__(_obj(raw, "version"))
        self.image = _opt_str(raw, "image", "version")
        self.last_attempt = DeployRecord.parse({k: raw[k] for k in _RECORD_KEYS if k in raw}, "version")
        self.projects: dict[str, ProjectVersions] = {}
        for name, entry in _obj(raw.get("projects") or {}, "version.projects").items():
            where = f"version.projects.{name}"
            entry = _obj(entry, where)
            cur, prev = entry.get("current"), entry.get("previous")
            self.projects[str(name)] = ProjectVersions(
                current=DeployRecord.parse(cur, where + ".current") if cur is not None else None,
                previous=DeployRecord.parse(prev, where + ".previous") if prev is not None else None,
            )

    def project(self, name: str | None = None) -> ProjectVersions:
            return self.projects.get(name or DEFAULT_PROJECT, ProjectVersions())


@dataclass(frozen=True)
class InFlight:
    """The mutating operation holding compose-manager's lock (`GET /status` -> `in_flight`)."""

    action: str
    started_at: str | None = None
    tag: str | None = None
    file: str | None = None
    services: tuple[str, ...] = ()


def parse_status(payload: Mapping[str, Any]) -> InFlight | None:
    """None when nothing holds the lock (`in_flight` absent or null)."""
    raw = payload.get("in_flight")
    if raw is None:
        return None
    obj = _obj(raw, "status.in_flight")
    action = obj.get("action")
    if not isinstance(action, str) or not action:
        raise ParseError("status.in_flight has no 'action' name")
    services = obj.get("services") or []
    if not isinstance(services, list) or not all(isinstance(s, str) for s in services):
        raise ParseError("status.in_flight.services is not a list of names")
    return InFlight(action=action, started_at=_opt_str(obj, "started_at", "status.in_flight"),
                    tag=_opt_str(obj, "tag", "status.in_flight"), file=_opt_str(obj, "file", "status.in_flight"),
                    services=tuple(services))


@dataclass(frozen=True)
class GpuInfo:
    """One GPU of `GET /host/gpu`: which containers hold it (`claimed_by`) and how loaded it is."""

    index: int
    memory_total_mb: int | None
    memory_used_mb: int | None
    utilization_pct: int | None
    claimed_by: tuple[str, ...]


def parse_host_gpu(payload: Mapping[str, Any]) -> list[GpuInfo]:
    """`{"gpus": [{index, memory_total_mb, ...}]}` (the `gpus` key is assumed; a bare list is accepted)."""
    raw = payload.get("gpus") if isinstance(payload, Mapping) else payload
    if not isinstance(raw, list):
        raise ParseError("host/gpu answer has no 'gpus' list")
    out: list[GpuInfo] = []
    for i, entry in enumerate(raw):
        where = f"host/gpu[{i}]"
        obj = _obj(entry, where)
        claimed = obj.get("claimed_by") or []
        if not isinstance(claimed, list) or not all(isinstance(c, str) for c in claimed):
            raise ParseError(f"{where}.claimed_by is not a list of container names")
        index = _int(obj, "index", where)
        assert index is not None
        out.append(GpuInfo(index=index, memory_total_mb=_int(obj, "memory_total_mb", where, optional=True),
                           memory_used_mb=_int(obj, "memory_used_mb", where, optional=True),
                           utilization_pct=_int(obj, "utilization_pct", where, optional=True),
                           claimed_by=tuple(claimed)))
    return sorted(out, key=lambda g: g.index)


@dataclass(frozen=True)
class HostCache:
    """`GET /host/cache`: the model weights cached on the host (its volumes are checked, not kept)."""

    weights: tuple[str, ...]

    def holds(self, repo: str) -> bool:
        """True if `org/repo` (or its `models--org--repo` directory name) is cached."""
        name = repo if repo.startswith("models--") else "models--" + repo.replace("/", "--")
        return name in self.weights


def parse_host_cache(payload: Mapping[str, Any]) -> HostCache:
    volumes_raw = payload.get("volumes") or []
    weights_raw = payload.get("weights") or []
    if not isinstance(volumes_raw, list):
        raise ParseError("host/cache.volumes is not a list")
    if not isinstance(weights_raw, list) or not all(isinstance(w, str) for w in weights_raw):
        raise ParseError("host/cache.weights is not a list of names")
    for i, v in enumerate(volumes_raw):
        obj = _obj(v, f"host/cache.volumes[{i}]")
        name = obj.get("name")
        if not isinstance(name, str) or not name:
            raise ParseError(f"host/cache.volumes[{i}] has no name")
        _int(obj, "size_bytes", f"host/cache.volumes[{i}]", optional=True)
    return HostCache(tuple(weights_raw))
