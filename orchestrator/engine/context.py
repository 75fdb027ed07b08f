"""The run's persisted context: everything a resumed run needs, typed, in one place.

Built by its constructor, `for_retry` or `from_json`, written with every transition by `to_json`;
nothing else reads the journal's context dict. Its JSON shape is fixed (a typed part is a plain
object, `{}` when unset), so a run journaled by any runner resumes under this one.

Rules:
- `previous` maps a service to the deploy a rollback goes back to: only ever one that succeeded.
- an `up` is applied only when its `DryRunRecord` equals the checked dry run's, env included.
- `soaks` and `soak_watch` survive a resume: a resumed soak continues, and notices an engine
  replaced while no runner watched.
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
    project: str | None = None
    env_fingerprint: str = ""
    force_recreate: bool = False
    #: docker/ps right after the dry run: name -> [id, created_at, state] (not the request: `==` ignores it)
    after: dict[str, list[str]] = field(default_factory=dict, compare=False)


@dataclass
class Failure:
    state: str
    event: str
    reason: str
    #: where `resume --retry` starts when the step's call was refused without acting
    #: (StepOutcome.retry_here): the step itself, or an up's own dry run; "" for its phase's start
    retry_at: str = ""


class DryRunPlan(TypedDict):
    """A dry run's verdict (`RunContext.plans`): what it planned per service."""

    actions: dict[str, str]
    verdict: str


class ColdStartProgress(TypedDict, total=False):
    """A cold-start gate's progress on one container (`RunContext.milestones`): line hashes, never text."""

    container: str
    per_rank: dict[str, list[int]]
    once: list[str]
    start: str
    last: str


@dataclass
class BeforeState:
    """What the host ran and answered before the run acted."""

    version: dict[str, Any] = field(default_factory=dict)  # `/version` (tag, commit, file), or {"error": ...}
    ps: dict[str, dict[str, str]] = field(default_factory=dict)  # docker/ps: container name -> {id, state, status}
    #: each peer's listing of the host ("peer/long", "peer/base" -> {listed, healthy}); None: not asked
    peers: dict[str, Any] | None = None
    completion: dict[str, Any] | None = None  # one long-domain completion: {ok, prompt_tokens | reason}

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class Placement:
    """Where preflight placed the host among the runbook's host states, and what it saw."""

    observed: dict[str, str] = field(default_factory=dict)  # service -> absent/new/previous/other/running
    state: str | None = None  # the declared host state it matched (None: none)
    serving: dict[str, str] | None = None  # engine -> its serving verdict then (None: not judged)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not (k == "serving" and v is None)}


@dataclass
class ActionMark:
    """Where this run last agreed with compose-manager's action log (engine/rules/foreign_change.py)."""

    count: int = 0  # entries known then
    last: list[Any] | None = None  # the last of them, as `foreign_change.identity` gives it (None: the log was empty)
    effect_id: int = 0  # the journal's last effect id then

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


#: The typed parts and their classes: written as their JSON object, `{}` when unset.
_TYPED_PARTS: dict[str, Any] = {"before": BeforeState, "placement": Placement, "action_mark": ActionMark}


def _typed(cls: Any, data: dict[str, Any]) -> Any:
    """A typed part from its journaled JSON: the keys it knows, deep-copied; a key it lacks (written
    by an older runner) takes its default."""
    return cls(**{k: copy.deepcopy(v) for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass
class RunContext:
    previous: dict[str, dict[str, str]] = field(default_factory=dict)
    previous_source: str = ""  # where the previous targets came from (the journal, the success record, --to-tag)
    plans: dict[str, DryRunPlan] = field(default_factory=dict)  # dry-run verdicts by state id
    retries: dict[str, int] = field(default_factory=dict)
    remedies: dict[str, int] = field(default_factory=dict)  # gate -> remedies taken (`Table.remedy_caps`)
    selected: list[str] | None = None
    checked_dry_run: DryRunRecord | None = None
    deployed: dict[str, dict[str, str]] = field(default_factory=dict)
    budget: dict[str, int] = field(default_factory=dict)
    before: BeforeState | None = None
    env_keys_fingerprint: str = ""
    env_keys: int = 0
    budget_env_fingerprint: str = ""  # the env map (fingerprint) the budget check last passed for
    failure: Failure | None = None
    replicas: list[str] = field(default_factory=list)  # rollback runs: which replicas go back
    start_phase: str | None = None  # rollout runs: the phase the forward procedure starts at (host-state placement)
    placement: Placement | None = None  # the host state preflight placed the host in, and what it saw
    soaks: dict[str, float] = field(default_factory=dict)  # soak start times by state id, on the run's clock
    soak_watch: dict[str, dict[str, str]] = field(default_factory=dict)  # soak -> {engine: container id} watched
    yes: bool = False  # started with --yes: a resume or an adopting server keeps it
    skip_tag_age_check: bool = False  # go on without GitHub's word on the tag
    #: keys other parts keep in the context (the server's `runbook_identity`): carried, never dropped
    extra: dict[str, Any] = field(default_factory=dict)
    #: one-shots this run removed since it last started them (docker/ps does not list exited ones)
    oneshots_removed: list[str] = field(default_factory=list)
    ready: dict[str, str] = field(default_factory=dict)  # cold start passed in this run: service -> container id
    milestones: dict[str, ColdStartProgress] = field(default_factory=dict)  # a resumed gate counts these as seen
    #: containers this run created / stopped: ID -> {service, state}; a rollback stops only what it created
    created: dict[str, dict[str, str]] = field(default_factory=dict)
    stopped: dict[str, dict[str, str]] = field(default_factory=dict)
    not_stopped: list[str] = field(default_factory=list)  # why a rollback left an engine running
    action_mark: ActionMark | None = None  # None: the action log not read yet

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
        data = dict(data or {})
        known = set(cls.__dataclass_fields__)
        kw = {k: v for k, v in data.items() if k in known and k != "extra"}
        kw["extra"] = {k: v for k, v in data.items() if k not in known}
        for name, part in {**_TYPED_PARTS, "checked_dry_run": DryRunRecord, "failure": Failure}.items():
            kw[name] = _typed(part, kw[name]) if kw.get(name) else None
        return cls(**kw)
