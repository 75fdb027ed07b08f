"""The run's persisted context: everything a resumed run needs, typed, in one place.

It is built by `RunContext.new` (a fresh run), `RunContext.for_retry` (a halted run's failed phase
started again) or `RunContext.from_json` (a run read back from the journal), and written with
every transition by `to_json`. Nothing else creates or reads the journal's context dict.

Rules and reasons:
- `previous` maps a service to the deploy a rollback goes back to (tag, file, commit). It is only
  ever a deploy that *succeeded* (see preflight), never an attempt.
- A checked dry run is kept as the request it checked (`DryRunRecord`), with a fingerprint of the
  env map it was sent with and the docker/ps snapshot after it; an `up` is applied only when
  `same_request` holds for it, env included.
- `soaks` (time soaked) and `soak_watch` (what the soak watched) survive a resume, so a resumed
  soak continues instead of starting again and notices an engine replaced while no runner
  watched; approvals live in the journal and are never asked for again.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class DryRunRecord:
    tag: str
    file: str
    services: list[str]
    project: str | None
    env_fingerprint: str
    force_recreate: bool = False
    #: docker/ps right after the dry run: name -> [id, created_at, state]
    after: dict[str, list[str]] = field(default_factory=dict)

    def key(self) -> tuple[Any, ...]:
        return (self.tag, self.file, tuple(self.services), self.project, self.env_fingerprint, self.force_recreate)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "DryRunRecord":
        return cls(
            tag=data["tag"], file=data["file"], services=list(data["services"]), project=data.get("project"),
            env_fingerprint=data.get("env_fingerprint", ""), force_recreate=bool(data.get("force_recreate", False)),
            after={k: list(v) for k, v in (data.get("after") or {}).items()},
        )


def same_request(dry: DryRunRecord | None, *, tag: str, file: str, services: list[str] | tuple[str, ...],
                 project: str | None, env_fingerprint: str, force_recreate: bool = False) -> bool:
    """True when an apply is the exact request `dry` checked: tag, file, services, project, env, force_recreate."""
    if dry is None:
        return False
    return dry.key() == (tag, file, tuple(services), project, env_fingerprint, force_recreate)


@dataclass
class Failure:
    state: str
    event: str
    reason: str


@dataclass
class RunContext:
    previous: dict[str, dict[str, str]] = field(default_factory=dict)
    #: where each previous target came from (the journal, compose-manager's success record, --to-tag)
    previous_source: str = ""
    #: dry-run verdicts by state id: {"actions": {service: action}, "verdict": ...}
    plans: dict[str, dict[str, Any]] = field(default_factory=dict)
    retries: dict[str, int] = field(default_factory=dict)
    #: gate state -> how often it took its remedy in this run (capped by `Table.remedy_caps`)
    remedies: dict[str, int] = field(default_factory=dict)
    selected: list[str] | None = None
    checked_dry_run: DryRunRecord | None = None
    deployed: dict[str, dict[str, str]] = field(default_factory=dict)
    budget: dict[str, int] = field(default_factory=dict)
    before: dict[str, Any] = field(default_factory=dict)
    env_keys_fingerprint: str = ""
    env_keys: int = 0
    #: the env map (fingerprint) the budget check last passed for
    budget_env_fingerprint: str = ""
    failure: Failure | None = None
    #: rollback runs: which replicas go back
    replicas: list[str] = field(default_factory=list)
    #: rollout runs: the phase the forward procedure starts at (host-state placement)
    start_phase: str | None = None
    #: the host state preflight placed the host in, and what it saw
    placement: dict[str, Any] = field(default_factory=dict)
    #: soak start times by state id, on the run's clock
    soaks: dict[str, float] = field(default_factory=dict)
    #: soak state id -> the engines (service -> container id) it watched when it started
    soak_watch: dict[str, dict[str, str]] = field(default_factory=dict)
    #: the run was started with --yes (approvals given up front): a resume or an adopting server keeps it
    yes: bool = False
    #: the operator chose to go on without GitHub's word on the tag (`--skip-tag-age-check`)
    skip_tag_age_check: bool = False
    #: keys other parts of the program keep in the run's context (e.g. the server's pinned
    #: `runbook_identity`): carried through every transition unchanged, never dropped
    extra: dict[str, Any] = field(default_factory=dict)
    #: one-shots (a perception check) this run removed since it last started them: docker/ps does not
    #: list exited containers, so this is how a second cleanup knows there is nothing left to stop
    oneshots_removed: list[str] = field(default_factory=list)
    #: engines whose cold start passed in this run: service -> container id (a resume re-checks them)
    ready: dict[str, str] = field(default_factory=dict)
    #: a cold-start gate's progress: service -> {container, per_rank, once, start, last}
    #: (orchestrator/engine/steps/cold_start_memory.py): a resumed gate counts it as seen
    milestones: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: containers this run created / stopped, by container ID -> {service, state} (orchestrator.engine.rules.ownership):
    #: a rollback step stops only what is in `created`, never a container it merely shares a name with
    created: dict[str, dict[str, str]] = field(default_factory=dict)
    stopped: dict[str, dict[str, str]] = field(default_factory=dict)
    #: why a rollback step left an engine running (said in the run's final message)
    not_stopped: list[str] = field(default_factory=list)
    #: where this run last agreed with compose-manager's action log (`orchestrator.engine.rules.foreign_change`):
    #: {"count": entries known, "last": the last one's identity, "effect_id": the journal's last effect then}
    action_mark: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def new(cls, **kw: Any) -> "RunContext":
        return cls(**kw)

    def for_retry(self) -> "RunContext":
        """What a `resume --retry` child keeps: targets and facts, not per-visit state."""
        return RunContext(previous=dict(self.previous), previous_source=self.previous_source, budget=dict(self.budget),
                          budget_env_fingerprint=self.budget_env_fingerprint,
                          before=dict(self.before), deployed=dict(self.deployed), start_phase=self.start_phase,
                          placement=dict(self.placement), skip_tag_age_check=self.skip_tag_age_check, yes=self.yes,
                          extra=dict(self.extra), created=dict(self.created), stopped=dict(self.stopped))

    def to_json(self) -> dict[str, Any]:
        """The context as the journal stores it: a deep copy, `extra`'s keys at the top level.

        Fast path (it runs at every transition): the deep copy is a JSON round trip done in C, kept
        only when it equals the object it copied (a tuple, a non-string key or a NaN would not
        survive it unchanged: those take `asdict`'s walk, as before)."""
        data = {name: getattr(self, name) for name in _FIELD_NAMES}
        for name in ("checked_dry_run", "failure"):
            if data[name] is not None:
                data[name] = asdict(data[name])
        extra = data.pop("extra") or {}
        shallow = {**extra, **data}
        try:
            copied = json.loads(json.dumps(shallow))
        except (TypeError, ValueError):
            copied = None
        if copied is not None and copied == shallow:
            return copied
        return self._to_json_walk()

    def _to_json_walk(self) -> dict[str, Any]:
        data = asdict(self)
        extra = data.pop("extra") or {}
        return {**extra, **data}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> "RunContext":
        data = dict(data or {})
        known = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in data.items() if k in known and k != "extra"}
        kw["extra"] = {k: v for k, v in data.items() if k not in known}
        if kw.get("checked_dry_run"):
            kw["checked_dry_run"] = DryRunRecord.from_json(kw["checked_dry_run"])
        if kw.get("failure"):
            f = kw["failure"]
            kw["failure"] = Failure(f["state"], f["event"], f["reason"])
        return cls(**kw)


_FIELD_NAMES = tuple(f.name for f in fields(RunContext))
