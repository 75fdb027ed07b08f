"""The specs of a runbook step's one request or gate: the compose requests (`down`, `dry_run`, `up`),
the dry run's plan expectation and the engine gates, each refusing what it cannot check on its own.
The rules that need the whole runbook live in `runbook_model`.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from orchestrator.analysis.spec import Seconds, _Strict
from orchestrator.util.durations import parse_duration

#: `services: selected` means "the services the previous dry run found on an older definition".
SELECTED = "selected"

# Empty defaults are `default_factory=lambda: []`, not `list`: pydantic reads each factory's signature
# when it builds the schema, and a builtin's is parsed from its text signature by the slow tokenizer.

OptionalSeconds = Annotated[float | None, BeforeValidator(lambda v: None if v is None else parse_duration(v))]


class ComposeSpec(_Strict):
    #: `new` (the runbook's file at the rollout tag) or `previous:<service>` (the file and tag that
    #: last deployed <service>, from the action log).
    file: str
    services: list[str] | Literal["selected"]
    force_recreate: bool = False

    @field_validator("file")
    @classmethod
    def _file_ref(cls, v: str) -> str:
        if v == "new" or (v.startswith("previous:") and len(v) > len("previous:")):
            return v
        raise ValueError("file must be 'new' or 'previous:<service>'")

    @field_validator("services")
    @classmethod
    def _services(cls, v: list[str] | str) -> list[str] | str:
        if isinstance(v, list):
            if not v:
                raise ValueError("services must not be empty (an empty list means every service)")
            if any(not s.strip() for s in v):
                raise ValueError("services must not contain an empty name")
            if len(set(v)) != len(v):
                raise ValueError("services lists a service twice")
        return v

    @model_validator(mode="after")
    def _force_scoped(self) -> ComposeSpec:
        # for services whose only change is inline `configs:` content, which docker compose leaves out
        # of its change detection (docker/compose#11900); the Runbook refuses it on an engine or a down
        if self.force_recreate and not isinstance(self.services, list):
            raise ValueError("force_recreate: true needs an explicit services list (the services whose only change is "
                             "inline configs content), not services: selected")
        return self

    def key(self) -> tuple[str, tuple[str, ...] | str, bool]:
        return (self.file, tuple(self.services) if isinstance(self.services, list) else self.services, self.force_recreate)


class DryRunExpectation(_Strict):
    """What a dry run's plan may do for the following `up` to be applied."""

    #: Services the plan is expected to create, recreate or start.
    change: list[str] | Literal["selected"] = Field(default_factory=lambda: [])
    #: Dependencies a scoped up may drag in (e.g. the one-shot model-downloader).
    may_also: list[str] = Field(default_factory=lambda: [])
    #: The listed services may already be up to date; if all are, the paired `up` is skipped.
    allow_unchanged: bool = False
    #: Remember which listed services the plan would change, for a following `services: selected`.
    select_changed: bool = False
    #: Preflight: only the tag and the file are checked, nothing is applied.
    tag_only: bool = False


class LogsSpec(_Strict):
    service: str
    #: Check rank_budget_bytes on every rank against the runbook budget (needs a `budget:` block).
    budget: bool = False
    #: How many ranks log each `log_gates.required_per_rank` milestone for this engine (a TP2 and a
    #: TP4 engine differ); default: `Runbook.ranks_of`.
    ranks: int | None = Field(default=None, gt=0)


class LogValue(_Strict):
    """A number a log line carries (the first group of `pattern`) and its tolerance: within
    [min, max], or `equals` +/- `tolerance` (absolute). Every matching line must hold."""

    pattern: str = Field(min_length=1)
    min: float | None = None
    max: float | None = None
    equals: float | None = None
    tolerance: float = Field(default=0.0, ge=0)
    #: at least this many lines must match (e.g. one per rank)
    at_least: int = Field(default=1, ge=0)

    @field_validator("pattern")
    @classmethod
    def _one_group(cls, v: str) -> str:
        try:
            rx = re.compile(v)
        except re.error as exc:
            raise ValueError(f"pattern {v!r} is not a regular expression: {exc}") from None
        if rx.groups != 1:
            raise ValueError(f"pattern {v!r} needs exactly one group (the number)")
        return v

    @model_validator(mode="after")
    def _bounded(self) -> LogValue:
        if self.min is None and self.max is None and self.equals is None:
            raise ValueError(f"log value {self.pattern!r} needs min, max or equals")
        return self


class MarkersSpec(_Strict):
    """A log gate over the service's whole log since its container started: named markers
    (`log_markers:`) that must / must not appear, and numeric values with tolerances. A marker whose
    text is null is unknown: reported as not checked, never guessed."""

    service: str = Field(min_length=1)
    require: list[str] = Field(default_factory=lambda: [])
    forbid: list[str] = Field(default_factory=lambda: [])
    values: list[LogValue] = Field(default_factory=lambda: [])


class PresenceSpec(_Strict):
    """Domain roles on both model-proxy peers: the host listed healthy under `listed` and absent
    from `absent` (roles of `domains:`), polled until true or `within` runs out. A drain is
    `absent: [base]`: the host withdrawn from a domain on both peers."""

    listed: list[str] = Field(default_factory=lambda: [])
    absent: list[str] = Field(default_factory=lambda: [])
    within: Seconds
    #: `this`: the run's host. `others`: every other host of `hosts:` (the capacity guard before a host
    #: leaves a domain); one the inventory does not know fails the gate (its capacity is unconfirmed).
    hosts: Literal["this", "others"] = "this"

    @model_validator(mode="after")
    def _roles(self) -> PresenceSpec:
        if self.hosts == "others" and self.absent:
            raise ValueError("presence with hosts: others checks capacity: use listed:, not absent:")
        if not self.listed and not self.absent:
            raise ValueError("presence needs listed: or absent:")
        if set(self.listed) & set(self.absent):
            raise ValueError("a domain role cannot be both listed and absent")
        return self


class CacheSpec(_Strict):
    """The host's model cache (`GET /host/cache`) holds these Hugging Face repos (`org/name`): a missed
    pre-stage fails here, before the host is touched; unanswered, noted as not checked."""

    holds: list[str] = Field(min_length=1)


class CaptureSpec(_Strict):
    """Keep services' logs in the run log (before a stop removes the container and its log)."""

    services: list[str] = Field(min_length=1)
    tail: int = Field(default=2000, gt=0, le=1_000_000)
    #: each service's log to its own file (`<state>/logs/<run_id>/<service>.log`, scrubbed), not the run log
    to_file: bool = False

    @model_validator(mode="after")
    def _big_to_file(self) -> CaptureSpec:
        if self.tail > 20000 and not self.to_file:
            raise ValueError("a capture of more than 20000 lines goes to a file: set to_file: true")
        return self


class Prerequisite(_Strict):
    """Another host's run that must be in the journal: its latest rollout of `runbook` ended
    DONE (its soak passed) at least `soaked` ago. Overridden only by name (`prerequisite:<host>`)."""

    host: str = Field(min_length=1)
    runbook: str = Field(min_length=1)
    soaked: Seconds = 0.0


class RelaySpec(_Strict):
    port: int = Field(gt=0, lt=65536)
    #: the env-map variable holding the relay's bearer token
    token_variable: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")


class VerifySpec(_Strict):
    """`peers`: both model-proxy peers list the host healthy under the long domain only (gpu02's
    tier). `completion`: a completion on the host's inference endpoint, then a follow-up that
    repeats its prefix reports cached tokens. Behind a load-balanced domain the follow-up may land
    on another engine: `attempts` (default 1) tries the pair that many times before failing."""

    peers: bool = True
    completion: bool = True
    attempts: int = Field(default=1, ge=1, le=10)


class SoakGauges(_Strict):
    """Gauges a soak reads through the soak relay at every poll (the relay must run during it)."""

    relay: RelaySpec
    gauges: list[GaugeBound] = Field(min_length=1)

    @model_validator(mode="after")
    def _no_within(self) -> SoakGauges:
        if any(g.within is not None for g in self.gauges):
            raise ValueError("a soak's gauges hold at every poll: within: belongs to a metrics gate")
        return self


class SoakSpec(_Strict):
    """A soak that watches: the engines of `replicas:` must stay the same containers, running and
    not restarted, (with `watch_logs`, the default) log none of `log_gates.forbidden`, and every
    gauge of `metrics` must hold at every poll (a relay that cannot be read for 3 polls in a row
    fails the soak too: unwatched is not healthy)."""

    duration: Seconds
    approval: bool = False
    watch_logs: bool = True
    metrics: list[SoakGauges] = Field(default_factory=lambda: [])


class GaugeBound(_Strict):
    """A gauge every sample of which must lie within [min, max]; with `within`, polled until it
    does (a drain: running requests down to 0) and failed when the time runs out."""

    name: str = Field(min_length=1)
    min: float | None = None
    max: float | None = None
    within: OptionalSeconds = None

    @model_validator(mode="after")
    def _bounded(self) -> GaugeBound:
        if self.min is None and self.max is None:
            raise ValueError(f"gauge {self.name!r} needs min or max (a bound that bounds nothing is a typo)")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"gauge {self.name!r}: min is above max")
        return self


class MetricsSpec(_Strict):
    """Prometheus evidence read from one engine through the soak relay's `/metrics`."""

    relay: RelaySpec
    #: Counters that must rise across a follow-up whose prefix left the device pool (host-restore
    #: evidence): a prompt, `evict` unrelated prompts, the counters read, the prompt again, read again;
    #: empty: no follow-up is sent.
    increase: list[str] = Field(default_factory=lambda: [])
    #: How many unrelated prompts push the first one out of the engine's device pool.
    evict: int = Field(default=6, ge=1, le=200)
    gauges: list[GaugeBound] = Field(default_factory=lambda: [])

    @model_validator(mode="after")
    def _something(self) -> MetricsSpec:
        if not self.increase and not self.gauges:
            raise ValueError("a metrics gate needs increase: or gauges: (it would check nothing)")
        return self


class LabelsSpec(_Strict):
    """An engine's telemetry carries the values its replica declares (`replica_values`)."""

    service: str = Field(min_length=1)
    replica: str = Field(min_length=1)
    #: keys that must appear as `key:value` tags in the container's `com.datadoghq.ad.logs` label
    log_tags: list[str] = Field(default_factory=lambda: [])
    #: keys that must appear as `nearai.otel.<key>=value` labels on the container
    otel_labels: list[str] = Field(default_factory=lambda: [])
    #: keys every sample of `metric` read through the relay must carry as labels
    metric_labels: list[str] = Field(default_factory=lambda: [])
    metric: str = "sglang:num_requests_total"
    relay: RelaySpec | None = None

    @model_validator(mode="after")
    def _something(self) -> LabelsSpec:
        if not (self.log_tags or self.otel_labels or self.metric_labels):
            raise ValueError("a labels gate needs log_tags:, otel_labels: or metric_labels: (it would check nothing)")
        if self.metric_labels and self.relay is None:
            raise ValueError("metric_labels: needs relay: (the metrics are read through the soak relay)")
        return self


class OneShotSpec(_Strict):
    """Wait for a one-shot container (started by the preceding up) to finish: exit 0 and, if set,
    a last line / a JSON event that says it passed. Its output is kept in the run log."""

    service: str = Field(min_length=1)
    timeout: Seconds
    #: the last non-empty line must contain this text (exactly as the container prints it)
    last_line: str | None = None
    #: or: a JSON line whose `event` is this and whose `ok` is true
    ok_event: str | None = None
