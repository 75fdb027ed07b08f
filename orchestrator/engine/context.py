"""The run's persisted context: everything a resumed run needs, typed, in one place.

It is built by `RunContext.new` (a fresh run), `RunContext.for_retry` (a halted run's failed phase
started again) or `RunContext.from_json` (a run read back from the journal), and written with
every transition by `to_json`. Nothing else creates or reads the journal's context dict.

The journal's JSON shape is fixed: each typed part (`BeforeState`, `Placement`, `ActionMark`) is
written as a plain object and read back from it (an unset one as `{}`), so a run journaled by any
runner resumes under this one. `plans` and `milestones` stay mappings of
a declared shape (`DryRunPlan`, `ColdStartProgress`): the cold-start gate reads and writes them as
such.

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

import copy
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict


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
    def from_json(cls, data: dict[str, Any]) -> DryRunRecord:
        return cls(
            tag=data["tag"], file=data["file"], services=list(data["services"]), project=data.get("project"),
            env_fingerprint=data.get("env_fingerprint", ""), force_recreate=bool(data.get("force_recreate", False)),
            after={k: list(v) for k, v in (data.get("after") or {}).items()},
        )


def same_request(dry: DryRunRecord | None, *, tag: str, file: str, services: list[str] | tuple[str, ...],
                 project: str | None, env_fingerprint: str, force_recreate: bool = False) -> bool:
    """True when an apply is the exact request `dry` checked: tag, file, services, project, env, force_recreate."""
    return dry is not None and dry.key() == (tag, file, tuple(services), project, env_fingerprint, force_recreate)


@dataclass
class Failure:
    state: str
    event: str
    reason: str
    #: where `resume --retry` starts when the step's call was refused without acting
    #: (StepOutcome.retry_here): the step itself, or an up's own dry run; "" for its phase's start
    retry_at: str = ""


class DryRunPlan(TypedDict):
    """A dry run's verdict, by its state id (`RunContext.plans`): what it planned per service."""

    actions: dict[str, str]
    verdict: str


class ColdStartProgress(TypedDict, total=False):
    """What a cold-start gate saw of one container's start, journaled (`RunContext.milestones`):
    hashes of lines, never their text (engine/rules/cold_start.py)."""

    container: str
    per_rank: dict[str, list[int]]
    once: list[str]
    start: str
    last: str


@dataclass
class BeforeState:
    """What the host ran and answered before the run acted (`check: before_state` / `rollback_targets`)."""

    #: compose-manager's `/version` (tag, commit, file), or {"error": ...}
    version: dict[str, Any] = field(default_factory=dict)
    #: docker/ps: container name -> {id, state, status}
    ps: dict[str, dict[str, str]] = field(default_factory=dict)
    #: each peer's listing of the host ("peer/long", "peer/base" -> {listed, healthy}); None: not asked
    peers: dict[str, Any] | None = None
    #: one long-domain completion ({ok, prompt_tokens} or {ok, reason}); None: not tried
    completion: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BeforeState:
        return cls(version=dict(data.get("version") or {}), ps={k: dict(v) for k, v in (data.get("ps") or {}).items()},
                   peers=data.get("peers"), completion=data.get("completion"))


@dataclass
class Placement:
    """Where preflight placed the host among the runbook's declared host states, and what it saw."""

    #: service -> what it runs (absent / new / previous / other / running)
    observed: dict[str, str] = field(default_factory=dict)
    #: the declared host state it matched (None: none)
    state: str | None = None
    #: engine -> its serving verdict then (serving / not serving / unknown); None: not judged
    serving: dict[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not (k == "serving" and v is None)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Placement:
        serving = data.get("serving")
        return cls(observed=dict(data.get("observed") or {}), state=data.get("state"),
                   serving=dict(serving) if serving is not None else None)


@dataclass
class ActionMark:
    """Where this run last agreed with compose-manager's action log (orchestrator/engine/rules/foreign_change.py)."""

    #: entries known then
    count: int
    #: the last of them, as `foreign_change.identity` gives it (None: the log was empty)
    last: list[Any] | None
    #: the journal's last effect id then
    effect_id: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ActionMark:
        last = data.get("last")
        return cls(count=int(data.get("count", 0)), last=list(last) if last is not None else None,
                   effect_id=int(data.get("effect_id", 0)))


#: The typed parts and their classes: written as their JSON object, `{}` when unset.
_TYPED_PARTS: dict[str, Any] = {"before": BeforeState, "placement": Placement, "action_mark": ActionMark}


@dataclass
class RunContext:
    previous: dict[str, dict[str, str]] = field(default_factory=dict)
    #: where each previous target came from (the journal, compose-manager's success record, --to-tag)
    previous_source: str = ""
    #: dry-run verdicts by state id
    plans: dict[str, DryRunPlan] = field(default_factory=dict)
    retries: dict[str, int] = field(default_factory=dict)
    #: gate state -> how often it took its remedy in this run (capped by `Table.remedy_caps`)
    remedies: dict[str, int] = field(default_factory=dict)
    selected: list[str] | None = None
    checked_dry_run: DryRunRecord | None = None
    deployed: dict[str, dict[str, str]] = field(default_factory=dict)
    budget: dict[str, int] = field(default_factory=dict)
    before: BeforeState | None = None
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
    placement: Placement | None = None
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
    #: a cold-start gate's progress by service: a resumed gate counts it as seen
    milestones: dict[str, ColdStartProgress] = field(default_factory=dict)
    #: containers this run created / stopped, by container ID -> {service, state} (orchestrator/engine/rules/ownership.py):
    #: a rollback step stops only what is in `created`, never a container it merely shares a name with
    created: dict[str, dict[str, str]] = field(default_factory=dict)
    stopped: dict[str, dict[str, str]] = field(default_factory=dict)
    #: why a rollback step left an engine running (said in the run's final message)
    not_stopped: list[str] = field(default_factory=list)
    #: where this run last agreed with compose-manager's action log (None: not read yet)
    action_mark: ActionMark | None = None

    @classmethod
    def new(cls, **kw: Any) -> RunContext:
        return cls(**kw)

    def for_retry(self) -> RunContext:
        """What a `resume --retry` child keeps: targets and facts, not per-visit state."""
        return RunContext(previous=copy.deepcopy(self.previous), previous_source=self.previous_source,
                          budget=dict(self.budget), budget_env_fingerprint=self.budget_env_fingerprint,
                          before=copy.deepcopy(self.before), deployed=copy.deepcopy(self.deployed),
                          start_phase=self.start_phase, placement=copy.deepcopy(self.placement),
                          skip_tag_age_check=self.skip_tag_age_check, yes=self.yes, extra=copy.deepcopy(self.extra),
                          created=copy.deepcopy(self.created), stopped=copy.deepcopy(self.stopped))

    def to_json(self) -> dict[str, Any]:
        """The context as the journal stores it: a deep copy, `extra`'s keys at the top level."""
        data = asdict(self)
        for name in _TYPED_PARTS:
            part = getattr(self, name)
            data[name] = part.to_json() if part is not None else {}
        extra = data.pop("extra") or {}
        return {**extra, **data}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> RunContext:
        """A context read back from the journal, as any runner wrote it."""
        data = dict(data or {})
        known = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in data.items() if k in known and k != "extra"}
        kw["extra"] = {k: v for k, v in data.items() if k not in known}
        if kw.get("checked_dry_run"):
            kw["checked_dry_run"] = DryRunRecord.from_json(kw["checked_dry_run"])
        if kw.get("failure"):
            f = kw["failure"]
            kw["failure"] = Failure(f["state"], f["event"], f["reason"], f.get("retry_at", ""))
        for name, part in _TYPED_PARTS.items():
            kw[name] = part.from_json(kw[name]) if kw.get(name) else None
        return cls(**kw)
