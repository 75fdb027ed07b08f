"""Runbooks as data: the schema of `runbooks/*.yaml` and its loader.

A runbook is read top to bottom like the prose runbook it encodes: preflight checks that change
nothing, then phases (one per replica, then reconcile), each a list of steps. A step does at most
one thing (a scoped `down`, a `dry_run`, an `up`) or waits on one gate (`logs`, `relay`, `verify`,
`soak`, a preflight `check`); each phase names its rollback. The loader refuses what the runbook
rules forbid, naming the field: unknown keys, an empty services list, `force_recreate: true` on an
engine or a down (it is only for the services whose only change is inline `configs:` content), an
`up` not preceded by a dry run of the same request, a file reference it cannot resolve.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchestrator.analysis.spec import AnalysisSpec, check_against_runbook as _check_analysis
from orchestrator.language.gate_specs import (AttestationSpec, EnvSpec, HttpJsonSpec, ImageSpec, ManualSpec, ProxyPoolSpec,
                                     PullRequestSpec, check_against_runbook as _check_gate)
from orchestrator.analysis.quiet_spec import QuietSpec, check_quiet as _check_quiet
from orchestrator.analysis.watch_spec import WatchSpec, check_watch as _check_watch
from orchestrator.util.durations import parse_duration
from orchestrator.util.user_errors import Refused, UserError

#: libyaml's safe loader when available (3x faster on large files), else the pure-Python one.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)



def _shipped_runbooks() -> Path:
    """The shipped runbooks' folder: `orchestrator/runbooks/` in an installed wheel (pyproject maps
    the top-level `runbooks/` onto that package), the top-level `runbooks/` in a checkout."""
    import orchestrator  # the package's own folder, wherever in it this module lives (issue 26's relayout)

    package = Path(orchestrator.__file__).resolve().parent
    installed = package / "runbooks"
    return installed if installed.is_dir() else package.parent / "runbooks"


RUNBOOK_DIR = _shipped_runbooks()
from orchestrator.util.names import DEFAULT_RUNBOOK  # noqa: E402,F401 - defined where the CLI reads it without pydantic

#: `services: selected` means "the services the previous dry run found on an older definition".
SELECTED = "selected"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _seconds(v: object) -> float:
    return parse_duration(v)  # type: ignore[arg-type]


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
    def _force_scoped(self) -> "ComposeSpec":
        # `force_recreate: true` recreates services whose only change is the content of an inline
        # `configs:` entry: docker compose leaves that content out of its change detection
        # (docker/compose#11900), so without it the new config never takes. The request must name
        # those services explicitly; the Runbook refuses it on an engine, on a down and in preflight.
        if self.force_recreate and not isinstance(self.services, list):
            raise ValueError("force_recreate: true needs an explicit services list (the services whose only change is "
                             "inline configs content), not services: selected")
        return self

    def key(self) -> tuple[str, tuple[str, ...] | str, bool]:
        return (self.file, tuple(self.services) if isinstance(self.services, list) else self.services, self.force_recreate)


class DryRunExpectation(_Strict):
    """What a dry run's plan may do for the following `up` to be applied."""

    #: Services the plan is expected to create, recreate or start.
    change: list[str] | Literal["selected"] = Field(default_factory=list)
    #: Dependencies a scoped up may drag in (e.g. the one-shot model-downloader).
    may_also: list[str] = Field(default_factory=list)
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
        import re
        try:
            rx = re.compile(v)
        except re.error as exc:
            raise ValueError(f"pattern {v!r} is not a regular expression: {exc}") from None
        if rx.groups != 1:
            raise ValueError(f"pattern {v!r} needs exactly one group (the number)")
        return v

    @model_validator(mode="after")
    def _bounded(self) -> "LogValue":
        if self.min is None and self.max is None and self.equals is None:
            raise ValueError(f"log value {self.pattern!r} needs min, max or equals")
        return self


class MarkersSpec(_Strict):
    """A per-service log gate over the service's whole log since its container started: named
    markers (`log_markers:` of the runbook) that must / must not appear, and numeric values with
    tolerances. A marker whose text the runbook leaves null is unknown: it is reported as not
    checked, never guessed."""

    service: str = Field(min_length=1)
    require: list[str] = Field(default_factory=list)
    forbid: list[str] = Field(default_factory=list)
    values: list[LogValue] = Field(default_factory=list)


class PresenceSpec(_Strict):
    """Domain roles on both model-proxy peers: the host listed healthy under `listed` and absent
    from `absent` (roles of `domains:`), polled until true or `within` runs out. A drain is
    `absent: [base]`: the host withdrawn from a domain on both peers."""

    listed: list[str] = Field(default_factory=list)
    absent: list[str] = Field(default_factory=list)
    within: float
    #: `this`: the run's host. `others`: every OTHER host of the runbook's `hosts:` (the capacity
    #: guard before a host leaves a domain: the rest of the tier must carry it). An `others` host
    #: the inventory does not know fails the gate: its capacity cannot be confirmed.
    hosts: Literal["this", "others"] = "this"

    _d = field_validator("within", mode="before")(classmethod(lambda cls, v: _seconds(v)))

    @model_validator(mode="after")
    def _roles(self) -> "PresenceSpec":
        if self.hosts == "others" and self.absent:
            raise ValueError("presence with hosts: others checks capacity: use listed:, not absent:")
        if not self.listed and not self.absent:
            raise ValueError("presence needs listed: or absent:")
        if set(self.listed) & set(self.absent):
            raise ValueError("a domain role cannot be both listed and absent")
        return self


class CacheSpec(_Strict):
    """The host's model cache (`GET /host/cache`) holds these Hugging Face repos (`org/name`): a
    pre-stage that did not fetch them fails here, before the host is touched, not in a cold start
    with the host out of its pool. Where compose-manager does not answer it, noted as not checked."""

    holds: list[str] = Field(min_length=1)


class CaptureSpec(_Strict):
    """Keep services' logs in the run log (before a stop removes the container and its log)."""

    services: list[str] = Field(min_length=1)
    tail: int = Field(default=2000, gt=0, le=1_000_000)
    #: issue 23: each service's log goes to its own file in the run's directory
    #: (`<state>/logs/<run_id>/<service>.log`, scrubbed), not into the run log; up to 1,000,000 lines
    to_file: bool = False

    @model_validator(mode="after")
    def _big_to_file(self) -> "CaptureSpec":
        if self.tail > 20000 and not self.to_file:
            raise ValueError("a capture of more than 20000 lines goes to a file: set to_file: true")
        return self


class Prerequisite(_Strict):
    """Another host's run that must be in the journal: its latest rollout of `runbook` ended
    DONE (its soak passed) at least `soaked` ago. Overridden only by name (`prerequisite:<host>`)."""

    host: str = Field(min_length=1)
    runbook: str = Field(min_length=1)
    soaked: float = 0.0

    _d = field_validator("soaked", mode="before")(classmethod(lambda cls, v: _seconds(v)))


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

    relay: "RelaySpec"
    gauges: list["GaugeBound"] = Field(min_length=1)

    @model_validator(mode="after")
    def _no_within(self) -> "SoakGauges":
        if any(g.within is not None for g in self.gauges):
            raise ValueError("a soak's gauges hold at every poll: within: belongs to a metrics gate")
        return self


class SoakSpec(_Strict):
    """A soak that watches: the engines of `replicas:` must stay the same containers, running and
    not restarted, (with `watch_logs`, the default) log none of `log_gates.forbidden`, and every
    gauge of `metrics` must hold at every poll (a relay that cannot be read for 3 polls in a row
    fails the soak too: unwatched is not healthy)."""

    duration: float
    approval: bool = False
    watch_logs: bool = True
    metrics: list[SoakGauges] = Field(default_factory=list)

    _d = field_validator("duration", mode="before")(classmethod(lambda cls, v: _seconds(v)))


class GaugeBound(_Strict):
    """A gauge every sample of which must lie within [min, max]; with `within`, polled until it
    does (a drain: running requests down to 0) and failed when the time runs out."""

    name: str = Field(min_length=1)
    min: float | None = None
    max: float | None = None
    within: float | None = None

    _d = field_validator("within", mode="before")(classmethod(lambda cls, v: None if v is None else _seconds(v)))

    @model_validator(mode="after")
    def _bounded(self) -> "GaugeBound":
        if self.min is None and self.max is None:
            raise ValueError(f"gauge {self.name!r} needs min or max (a bound that bounds nothing is a typo)")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"gauge {self.name!r}: min is above max")
        return self


class MetricsSpec(_Strict):
    """Prometheus evidence read from one engine through the soak relay's `/metrics`."""

    relay: RelaySpec
    #: Counters that must rise across a follow-up whose prefix left the device pool (host-restore
    #: evidence): the gate sends a prompt, `evict` unrelated prompts, reads the counters, sends the
    #: prompt again and reads them again. Empty: no follow-up is sent.
    increase: list[str] = Field(default_factory=list)
    #: How many unrelated prompts push the first one out of the device pool. A runbook setting: how
    #: many it takes depends on the engine's device pool (the simulator's holds 4 prompts).
    evict: int = Field(default=6, ge=1, le=200)
    gauges: list[GaugeBound] = Field(default_factory=list)

    @model_validator(mode="after")
    def _something(self) -> "MetricsSpec":
        if not self.increase and not self.gauges:
            raise ValueError("a metrics gate needs increase: or gauges: (it would check nothing)")
        return self


class LabelsSpec(_Strict):
    """An engine's telemetry carries the values its replica declares (`replica_values`)."""

    service: str = Field(min_length=1)
    replica: str = Field(min_length=1)
    #: keys that must appear as `key:value` tags in the container's `com.datadoghq.ad.logs` label
    log_tags: list[str] = Field(default_factory=list)
    #: keys that must appear as `nearai.otel.<key>=value` labels on the container
    otel_labels: list[str] = Field(default_factory=list)
    #: keys every sample of `metric` read through the relay must carry as labels
    metric_labels: list[str] = Field(default_factory=list)
    metric: str = "sglang:num_requests_total"
    relay: RelaySpec | None = None

    @model_validator(mode="after")
    def _something(self) -> "LabelsSpec":
        if not (self.log_tags or self.otel_labels or self.metric_labels):
            raise ValueError("a labels gate needs log_tags:, otel_labels: or metric_labels: (it would check nothing)")
        if self.metric_labels and self.relay is None:
            raise ValueError("metric_labels: needs relay: (the metrics are read through the soak relay)")
        return self


class OneShotSpec(_Strict):
    """Wait for a one-shot container (started by the preceding up) to finish: exit 0 and, if set,
    a last line / a JSON event that says it passed. Its output is kept in the run log."""

    service: str = Field(min_length=1)
    timeout: float
    #: the last non-empty line must contain this text (exactly as the container prints it)
    last_line: str | None = None
    #: or: a JSON line whose `event` is this and whose `ok` is true
    ok_event: str | None = None

    _d = field_validator("timeout", mode="before")(classmethod(lambda cls, v: _seconds(v)))


STEP_KINDS = ("check", "down", "dry_run", "up", "logs", "relay", "verify", "soak", "metrics", "labels", "oneshot",
              "markers", "presence", "capture", "cache", "analysis", "quiet",
              "env", "manual", "proxy_pool", "pull_request", "http_json", "attestation", "image")
#: issue 23's gates outside the engines (orchestrator/language/gate_specs.py)
EXTERNAL_KINDS = ("env", "manual", "proxy_pool", "pull_request", "http_json", "attestation", "image")
#: The step kinds that may be observe-only (`observe: true`): evidence gates that change nothing and
#: that no stop guard, readiness or routing decision reads.
OBSERVABLE_KINDS = ("metrics", "labels", "markers", "presence", "capture", "cache", "env", "proxy_pool", "pull_request",
                    "http_json", "attestation", "image")
StepKind = Literal["check", "down", "dry_run", "up", "logs", "relay", "verify", "soak", "metrics", "labels", "oneshot",
                   "markers", "presence", "capture", "cache", "analysis", "quiet",
                   "env", "manual", "proxy_pool", "pull_request", "http_json", "attestation", "image"]


class Step(_Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    say: str = Field(min_length=1)
    check: Literal["env_map", "budget", "host_state", "before_state", "rollback_targets", "tag_age", "prerequisites",
                   "model_cache"] | None = None
    down: ComposeSpec | None = None
    dry_run: ComposeSpec | None = None
    up: ComposeSpec | None = None
    logs: LogsSpec | None = None
    relay: RelaySpec | None = None
    verify: VerifySpec | None = None
    soak: SoakSpec | None = None
    metrics: MetricsSpec | None = None
    labels: LabelsSpec | None = None
    oneshot: OneShotSpec | None = None
    markers: MarkersSpec | None = None
    presence: PresenceSpec | None = None
    capture: CaptureSpec | None = None
    cache: CacheSpec | None = None
    #: issue 23: candidate vs control over a window of live traffic (orchestrator/analysis/spec.py)
    analysis: AnalysisSpec | None = None
    #: issue 23: gates outside the engines (orchestrator/language/gate_specs.py)
    env: EnvSpec | None = None
    manual: ManualSpec | None = None
    proxy_pool: ProxyPoolSpec | None = None
    pull_request: PullRequestSpec | None = None
    http_json: HttpJsonSpec | None = None
    attestation: AttestationSpec | None = None
    image: ImageSpec | None = None
    #: issue 23: a replica's metrics watched while this step runs (orchestrator/analysis/watch_spec.py)
    watch: WatchSpec | None = None
    #: issue 23: wait for a quiet long domain or a time window (orchestrator/analysis/quiet_spec.py)
    quiet: QuietSpec | None = None
    plan: DryRunExpectation | None = None
    #: On a `logs:` gate of a forward phase: what to do instead of failing when the gate fails on a
    #: line carrying a named log marker (see `Remedy`).
    remedy: "Remedy | None" = None
    #: An observe-only gate (a new check trialled in production): its pass or failure is journaled
    #: and notified, and the run goes on either way. Only on gates that read evidence and are not
    #: what a stop or the capacity promise rests on (OBSERVABLE_KINDS).
    observe: bool = False

    @model_validator(mode="after")
    def _one_thing(self) -> "Step":
        kinds = [k for k in STEP_KINDS if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(f"step {self.id!r} must do exactly one of {'/'.join(STEP_KINDS)}, not {kinds or 'none'}")
        if self.observe and (kinds[0] not in OBSERVABLE_KINDS or self.remedy is not None):
            raise ValueError(f"step {self.id!r}: observe: true is for evidence gates ({', '.join(OBSERVABLE_KINDS)}) "
                             f"without a remedy, not a {kinds[0]} step: a run must never go on past a failed "
                             f"stop, start, readiness, soak or routing check")
        if self.dry_run is not None and self.plan is None:
            raise ValueError(f"step {self.id!r}: a dry_run needs a plan: gate")
        if self.plan is not None and self.dry_run is None:
            raise ValueError(f"step {self.id!r}: plan: belongs to a dry_run step")
        return self

    @property
    def kind(self) -> StepKind:
        for k in STEP_KINDS:
            if getattr(self, k) is not None:
                return k  # type: ignore[return-value]
        raise AssertionError("validated above")

    @property
    def compose(self) -> ComposeSpec | None:
        return self.down or self.dry_run or self.up

    @property
    def mutating(self) -> bool:
        return self.kind in ("down", "up")


class Remedy(_Strict):
    """A known fault's own way out, taken instead of the phase's rollback.

    On a `logs:` (cold-start) gate: when the gate fails on a forbidden line that carries the text
    of log marker `marker` (a name in the runbook's `log_markers:`), the gate sends REMEDY instead
    of FAIL, the remedy's `steps` run, and the run goes back to the gate, which reads the engine's
    log afresh (from its new container's start). Rules, and why:

    - Back to the gate, not past it: the gate's own `ok` stays the one record that the engine
      passed its cold start (the journal, `rollout --continue`, `status` read it), and a second
      marker line after the remedy is judged by the same gate and the same cap.
    - `max` (default 1) lives in the compiled table (`Table.remedy_caps`): once the remedy was taken
      that many times in this run, the marker fails the gate as before (-> the phase's rollback).
    - Any failure or abort inside the remedy takes the phase's rollback; a halt halts. A remedy's
      steps are checked like any other list (an up needs a dry run of the same request before it
      in the remedy, no empty services, no force_recreate) and run with every executor rule (stop
      guard, dry run before up, journaled effects, resume at any of its states).
    - Only a forward phase's `logs:` gate takes one (a rollback's failure halts; no other gate
      fails on a log marker); a remedy step has no remedy of its own and no preflight `check:`.
    - A marker left null (its text unknown) could never trigger: the loader refuses it, as it
      refuses a marker whose text contains none of `log_gates.forbidden` (the gate would never fail
      on it). The key is `marker:`, not `on:` (YAML 1.1 reads a bare `on` as true).
    """

    marker: str = Field(min_length=1)
    max: int = Field(default=1, ge=1, le=5)
    steps: list["Step"] = Field(min_length=1)


class Rollback(_Strict):
    steps: list[Step] = Field(default_factory=list)
    #: rolled_back: the steps undid the phase. halted: a human must act (message required).
    #: aborted: the phase changed nothing that needs undoing (no steps allowed; message
    #: required): the run ends ABORTED, exit 5, e.g. a refusal before the host is touched.
    ends: Literal["rolled_back", "halted", "aborted"]
    #: For `ends: halted|aborted`: what the operator is told. `{host}`, `{run_id}`, `{tag}` are filled in.
    message: str | None = None


SoakGauges.model_rebuild()
SoakSpec.model_rebuild()
Step.model_rebuild()


class Phase(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str = ""
    replica: str | None = None
    steps: list[Step] = Field(min_length=1)
    rollback: Rollback | None = None
    #: Where `resume --retry` restarts after this phase failed: an earlier forward phase whose work
    #: this one assumes (the base tier's switch assumes a drained host: it restarts at the capacity
    #: guard, which checks the other hosts again, then drains again). Default: this phase.
    retry_from: str | None = None


class Budget(_Strict):
    variable: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    default: str
    allowed: list[str] = Field(min_length=1)
    replicas: int = Field(gt=0)
    ranks_per_replica: int = Field(gt=0)
    reserve: str
    min_page_cache: str = "0"
    engines: list[str] = Field(min_length=1)


class Timeouts(_Strict):
    cold_start: float
    stop_grace: float
    gone: float
    relay: float
    discovery: float

    _d = field_validator("*", mode="before")(classmethod(lambda cls, v: _seconds(v)))


class LogGates(_Strict):
    ranks: int = Field(gt=0)
    required_per_rank: list[str]
    required: list[str]
    forbidden: list[str]
    #: The line every start of an engine logs first. Seen again after it started (or after its
    #: ready line), it means the engine restarted inside its container: a cold start that saw it
    #: fails, and an engine that logged it after its ready line is not serving.
    startup: str = "server_args=ServerArgs("


#: What a service runs in a declared host state: `absent` (not in docker/ps), `new` (running, and
#: the new file's dry run at the tag plans nothing for it), `previous` (running, and that dry run
#: would recreate it), `running` (running, either definition).
ServiceState = Literal["absent", "new", "previous", "running"]


class HostState(_Strict):
    """A state of the host the runbook recognises, and where a rollout continues from it."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    say: str = Field(min_length=1)
    services: dict[str, ServiceState] = Field(min_length=1)
    #: `start`: run from the beginning; `done`: nothing to do; a phase name: continue there, only
    #: with the operator's explicit `--continue`.
    action: str


class Domains(BaseModel):
    """Domain roles -> model-proxy domains. `long` and `base` are the two tiers every shipped gate
    knows (gpu02's verify and before-state name them); a runbook may name more roles for its
    `presence:` gates (e.g. `canary: ...`), each a domain of its own."""

    model_config = ConfigDict(extra="allow", frozen=True)

    long: str
    base: str

    def roles(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.model_dump().items()}

    def of(self, role: str) -> str:
        return self.roles()[role]


class Runbook(_Strict):
    name: str
    title: str
    hosts: list[str] = Field(min_length=1)
    file: str
    #: Other compose files this runbook deploys (the previous files its rollbacks go back to, as
    #: of writing): with `file`, how a CI job finds the runbooks a changed file affects
    #: (`orchestrator.previews.ci_preview.runbooks_affected_by`) without reading code.
    deploys: list[str] = Field(default_factory=list)
    model: str
    #: Hugging Face repos (`org/name`) the new file's engines load: `plan --live` asks the host's
    #: model cache whether it holds them (missing weights mean a download before the cold start).
    weights: list[str] = Field(default_factory=list)
    #: replica -> the GPU indexes its engine holds. With compose-manager's `GET /host/gpu`, an
    #: engine's down is sent only while no other engine holds those GPUs, and its gate passes only
    #: once no engine does (the new engine must find them free). Monitoring containers that see
    #: every GPU (the DCGM exporter) are not engines and do not count.
    replica_gpus: dict[str, list[int]] = Field(default_factory=dict)
    domains: Domains
    #: The HiCache host-RAM budget; optional (a tier without HiCache has none). `check: budget` and
    #: `logs: {budget: true}` need it.
    budget: Budget | None = None
    timeouts: Timeouts
    log_gates: LogGates
    preflight: list[Step]
    phases: list[Phase] = Field(min_length=1)
    full_rollback: list[Phase] = Field(default_factory=list)
    #: service -> why it is safe that a rollback leaves it on the new file (a forward step such as
    #: the reconcile recreated it; the rollback does not undo that). A rollback's last line names
    #: every service still on the new file with this reason, or says that the runbook gives none.
    rollback_keeps: dict[str, str] = Field(default_factory=dict)
    #: replica -> the engine services that can serve as it (every definition, old and new). An
    #: engine is stopped only while it does not serve or another replica serves.
    replicas: dict[str, list[str]] = Field(default_factory=dict)
    #: The orchestrator's own tag check (compose-manager's is off in production): the tag is merged
    #: to main in the compose-files repository and its commit at least this old.
    min_tag_age: float = 48 * 3600.0
    #: The host states the runbook recognises (before / part-way / at target), checked in order.
    host_states: list[HostState] = Field(default_factory=list)
    #: Per-replica values (telemetry the new file declares for each replica): replica -> key -> value.
    #: A labels gate checks the keys it names against its replica's values here.
    replica_values: dict[str, dict[str, str]] = Field(default_factory=dict)
    #: Named log markers for `markers:` gates. null = the exact line is not known (say so in a
    #: comment); the gate then reports the marker as not checked instead of inventing a string.
    log_markers: dict[str, str | None] = Field(default_factory=dict)
    #: Other hosts' runs that must be DONE and soaked first (`check: prerequisites`, fleet runs).
    prerequisites: list[Prerequisite] = Field(default_factory=list)
    #: Who carries the traffic while an engine is stopped. `host` (gpu02): another replica of the
    #: same host must serve (the stop guard). `fleet` (the base tier, whose host moves as a whole):
    #: the run's host must first be withdrawn from every domain on every model-proxy peer (the
    #: drain); the other hosts of `hosts:` carry the domain, which a `presence: {hosts: others}`
    #: gate confirms before the drain.
    capacity: Literal["host", "fleet"] = "host"

    _age = field_validator("min_tag_age", mode="before")(classmethod(lambda cls, v: _seconds(v)))

    @field_validator("file")
    @classmethod
    def _relative(cls, v: str) -> str:
        if not v or v.startswith("/") or ".." in Path(v).parts:
            raise ValueError("file must be a relative path inside the compose-files repository")
        return v

    @field_validator("deploys")
    @classmethod
    def _relative_all(cls, v: list[str]) -> list[str]:
        for f in v:
            if not f or f.startswith("/") or ".." in Path(f).parts:
                raise ValueError(f"deploys: {f!r} must be a relative path inside the compose-files repository")
        return v

    @model_validator(mode="after")
    def _rules(self) -> "Runbook":
        for p in self.preflight:
            if p.mutating:
                raise ValueError(f"preflight step {p.id!r} must not mutate (no down/up in preflight)")
        _check_sequence("preflight", self.preflight, allow_mutation=False)
        names = set()
        for ph in self.phases:
            if ph.name in names:
                raise ValueError(f"phase {ph.name!r} is defined twice")
            names.add(ph.name)
            _check_sequence(f"phases.{ph.name}", ph.steps)
            if ph.rollback is not None:
                _check_sequence(f"phases.{ph.name}.rollback", ph.rollback.steps)
                if ph.rollback.ends in ("halted", "aborted") and not ph.rollback.message:
                    raise ValueError(f"phases.{ph.name}.rollback: ends: {ph.rollback.ends} needs a message for the operator")
                if ph.rollback.ends == "aborted" and ph.rollback.steps:
                    raise ValueError(f"phases.{ph.name}.rollback: ends: aborted means nothing to undo: it takes no steps "
                                     f"(use ends: rolled_back)")
        for i, ph in enumerate(self.phases):
            if ph.retry_from is not None and ph.retry_from not in [p.name for p in self.phases[:i]]:
                raise ValueError(f"phases.{ph.name}.retry_from: {ph.retry_from!r} is not an earlier phase "
                                 f"({', '.join(p.name for p in self.phases[:i]) or 'none'})")
        for ph in self.full_rollback:
            _check_sequence(f"full_rollback.{ph.name}", ph.steps)
        forward = {f"phases.{ph.name}" for ph in self.phases}
        for i, hs in enumerate(self.host_states):
            if hs.action not in ("start", "done") and hs.action not in names:
                raise ValueError(f"host_states[{i}] ({hs.name}): action must be start, done or a phase name, not {hs.action!r}")
        for lists_where, steps in self._named_step_lists():
            for i, st in enumerate(steps):
                here = f"{lists_where}.steps[{i}] ({st.id})"
                if st.remedy is not None:
                    self._check_remedy(here, st, forward=lists_where in forward)
                if self.budget is None and (st.check == "budget" or (st.logs is not None and st.logs.budget)):
                    raise ValueError(f"{here}: a budget check needs the runbook's budget: block")
                if st.check == "prerequisites" and not self.prerequisites:
                    raise ValueError(f"{here}: check: prerequisites needs a prerequisites: list")
                if st.markers is not None:
                    for name in [*st.markers.require, *st.markers.forbid]:
                        if name not in self.log_markers:
                            raise ValueError(f"{here}: marker {name!r} is not in log_markers")
                if st.presence is not None:
                    if st.presence.hosts == "others" and len(self.hosts) < 2:
                        raise ValueError(f"{here}: presence hosts: others needs at least two hosts: in the runbook")
                    for role in [*st.presence.listed, *st.presence.absent]:
                        if role not in self.domains.roles():
                            raise ValueError(f"{here}: domain role {role!r} is not one of {', '.join(self.domains.roles())}")
                if st.analysis is not None:
                    _check_analysis(here, st.analysis, self.replicas, self.replica_gpus)
                if st.quiet is not None:
                    _check_quiet(here, st.quiet, self.replicas)
                if st.watch is not None:
                    _check_watch(here, st.kind, st.watch, self.replicas)
                if st.kind in EXTERNAL_KINDS:
                    _check_gate(here, st.kind, getattr(st, st.kind), self.replicas, self.hosts, self.replica_values)
                if st.labels is not None:
                    vals = self.replica_values.get(st.labels.replica)
                    if vals is None:
                        raise ValueError(f"{lists_where}.steps[{i}] ({st.id}): labels.replica {st.labels.replica!r} has no replica_values entry")
                    for key in [*st.labels.log_tags, *st.labels.otel_labels, *st.labels.metric_labels]:
                        if key not in vals:
                            raise ValueError(f"{lists_where}.steps[{i}] ({st.id}): replica_values.{st.labels.replica} has no {key!r}")
        for lists_where, steps in self._named_step_lists():
            for i, st in enumerate(steps):
                self._check_force_recreate(f"{lists_where}.steps[{i}] ({st.id})", st)
        for svc in self.rollback_keeps:
            if svc in self.engines():
                raise ValueError(f"rollback_keeps.{svc}: an engine never stays on the new file after a rollback")
        seen_engines: set[str] = set()
        for replica, engines in self.replicas.items():
            if not engines:
                raise ValueError(f"replicas.{replica}: list the engine services of this replica")
            if seen_engines & set(engines):
                raise ValueError(f"replicas.{replica}: a service belongs to one replica only")
            seen_engines |= set(engines)
        return self

    def _check_force_recreate(self, here: str, st: Step) -> None:
        """force_recreate only on a dry run / up naming no engine: a forced recreate of an engine
        would stop a serving replica that no dry run said needed it."""
        if st.down is not None and st.down.force_recreate:
            raise ValueError(f"{here}.down.force_recreate: a down recreates nothing (remove it)")
        for kind, spec in (("dry_run", st.dry_run), ("up", st.up)):
            if spec is None or not spec.force_recreate:
                continue
            engines = [s for s in spec.services if s in self.engines() or (self.budget and s in self.budget.engines)]
            if engines:
                raise ValueError(f"{here}.{kind}.force_recreate: never on an engine ({', '.join(engines)}): it is only for "
                                 f"services whose only change is inline configs content (docker/compose#11900)")
            if st.plan is not None and st.plan.tag_only:
                raise ValueError(f"{here}.{kind}.force_recreate: a preflight tag check recreates nothing (remove it)")

    def _check_remedy(self, here: str, st: Step, *, forward: bool) -> None:
        """The rules of `Remedy` (its docstring gives the reasons), naming the field."""
        rem = st.remedy
        assert rem is not None
        where = f"{here}.remedy"
        if not forward:
            raise ValueError(f"{where}: a remedy belongs to a gate of a forward phase (a failure in preflight aborts, "
                             f"one in a rollback halts)")
        if st.logs is None:
            raise ValueError(f"{where}: only a logs: gate takes a remedy (it is the gate that fails on a log marker)")
        if rem.marker not in self.log_markers:
            raise ValueError(f"{where}.marker: {rem.marker!r} is not in log_markers")
        text = self.log_markers[rem.marker]
        if text is None:
            raise ValueError(f"{where}.marker: log_markers.{rem.marker} is null (its text is unknown), so this remedy "
                             f"could never be taken; set the marker's text or remove the remedy")
        if not any(bad in text for bad in self.log_gates.forbidden):
            raise ValueError(f"{where}.marker: the text of {rem.marker!r} ({text!r}) contains none of log_gates.forbidden, "
                             f"so the gate never fails on it and the remedy could never be taken")
        for j, rs in enumerate(rem.steps):
            if rs.remedy is not None:
                raise ValueError(f"{where}.steps[{j}] ({rs.id}): a remedy step has no remedy of its own (a failure in a "
                                 f"remedy takes the phase's rollback)")
            if rs.check is not None:
                raise ValueError(f"{where}.steps[{j}] ({rs.id}): check: is a preflight step, not a remedy step")
        _check_sequence(where, rem.steps)

    # -- queries the rest of the code asks -------------------------------------------------
    def phase(self, name: str) -> Phase:
        for ph in self.phases + self.full_rollback:
            if ph.name == name:
                return ph
        raise KeyError(name)

    def oneshot_services(self) -> set[str]:
        """Services a `oneshot:` gate waits for (they exit when done; docker/ps no longer lists them)."""
        return {st.oneshot.service for steps in self.step_lists() for st in steps if st.oneshot is not None}

    def replica_of(self, service: str) -> str | None:
        for replica, engines in self.replicas.items():
            if service in engines:
                return replica
        return None

    def engines(self) -> list[str]:
        return [e for engines in self.replicas.values() for e in engines]

    def rollback_replicas(self, which: str, option: str = "--replica") -> list[str]:
        """`all` -> every replica in the whole-host rollback's safe order; else that one replica."""
        order = [ph.replica for ph in self.full_rollback if ph.replica]
        if which == "all":
            return order
        if which not in order:
            raise UserError(f"{option} {which!r} is not one of {', '.join(order + ['all'])}")
        return [which]

    def phase_names(self) -> list[str]:
        return [ph.name for ph in self.phases]

    def previous_refs(self) -> list[str]:
        """Services whose previous deploy must be read from the action log during preflight."""
        seen: list[str] = []
        for steps in self.step_lists():
            for s in steps:
                c = s.compose
                if c is not None and c.file.startswith("previous:"):
                    svc = c.file.split(":", 1)[1]
                    if svc not in seen:
                        seen.append(svc)
        return seen

    def _named_step_lists(self) -> list[tuple[str, list[Step]]]:
        out = [("preflight", self.preflight)]
        for ph in self.phases:
            out.append((f"phases.{ph.name}", ph.steps))
            if ph.rollback:
                out.append((f"phases.{ph.name}.rollback", ph.rollback.steps))
        out += [(f"full_rollback.{ph.name}", ph.steps) for ph in self.full_rollback]
        return out + [(f"{where}.steps[{i}] ({st.id}).remedy", st.remedy.steps)
                      for where, steps in out for i, st in enumerate(steps) if st.remedy is not None]

    def previous_ref_of(self) -> dict[str, str]:
        """service -> the `<ref>` of the first `previous:<ref>` request that names it (the base
        tier's FP8 r2 is stopped with `previous:model-sg-glm53-fp8-tp4-r1`): which previous deploy
        tells the file its logs are read through."""
        out: dict[str, str] = {}
        for steps in self.step_lists():
            for st in steps:
                c = st.compose
                if c is not None and c.file.startswith("previous:") and isinstance(c.services, list):
                    for svc in c.services:
                        out.setdefault(svc, c.file.split(":", 1)[1])
        return out

    def step_lists(self) -> list[list[Step]]:
        """Every list of steps: preflight, each phase and its rollback, the whole-host rollback, and
        every gate's remedy (its requests count as the runbook's: `previous:` refs, one-shots)."""
        return [steps for _, steps in self._named_step_lists()]


def _check_sequence(where: str, steps: list[Step], *, allow_mutation: bool = True) -> None:
    ids: set[str] = set()
    last_dry_run: Step | None = None
    selected_available = False
    started: set[str] = set()
    for i, s in enumerate(steps):
        if s.id in ids:
            raise ValueError(f"{where}.steps[{i}]: step id {s.id!r} is used twice")
        ids.add(s.id)
        c = s.compose
        if c is not None and c.services == SELECTED and not selected_available:
            raise ValueError(f"{where}.steps[{i}] ({s.id}): services: selected needs an earlier dry run with select_changed: true")
        if s.dry_run is not None:
            last_dry_run = s
            if s.plan is not None and s.plan.select_changed:
                selected_available = True
        elif s.oneshot is not None and s.oneshot.service not in started:
            raise ValueError(f"{where}.steps[{i}] ({s.id}): oneshot waits for {s.oneshot.service!r}, which no earlier up in "
                             f"this list starts")
        elif s.up is not None:
            if isinstance(s.up.services, list):
                started.update(s.up.services)
            if last_dry_run is None or last_dry_run.dry_run is None or last_dry_run.dry_run.key() != s.up.key():
                raise ValueError(
                    f"{where}.steps[{i}] ({s.id}): an up must be preceded by a dry_run of the same request "
                    f"(same file, services and force_recreate)"
                )
            last_dry_run = None  # one dry run covers one up
        elif s.down is not None:
            last_dry_run = None  # the state changed since the dry run


def _field_path(err: dict) -> str:
    return ".".join(str(p) for p in err["loc"])


def resolve_runbook_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    candidate = RUNBOOK_DIR / f"{name_or_path}.yaml"
    if candidate.exists():
        return candidate
    known = ", ".join(sorted(x.stem for x in RUNBOOK_DIR.glob("*.yaml"))) or "none"
    raise UserError(f"runbook {name_or_path!r} not found: pass a path or one of {known}")


def identity_of(name_or_path: str) -> dict[str, str]:
    """What a run records of its runbook: name, the resolved path and the sha256 of its bytes, so
    that `resume` loads the same runbook or refuses (never another file of the same name)."""
    path = resolve_runbook_path(name_or_path).resolve()
    return {"name": path.stem, "path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def load_recorded_runbook(name: str, identity: dict[str, str] | None) -> Runbook:
    """The runbook a run was started with: by its recorded path when it has one, checked against
    its recorded sha256 (refused if the file changed since); else by name (older runs)."""
    from orchestrator.util.user_errors import Refused

    if not identity or not identity.get("sha256"):
        return load_runbook(name)
    where = identity.get("path") or name
    try:
        path = resolve_runbook_path(where)
        data = path.read_bytes()
    except (UserError, OSError):
        raise Refused(f"the runbook run with ({identity.get('name', name)}, {where}) is gone: this run cannot be continued "
                      f"with another file") from None
    if hashlib.sha256(data).hexdigest() != identity["sha256"]:
        raise Refused(f"runbook {identity.get('name', name)} changed since this run started ({where}): a run is only "
                      f"continued with the runbook it started with; restore it, or start a new run")
    return load_runbook(str(path))


def load_runbook(name_or_path: str = DEFAULT_RUNBOOK) -> Runbook:
    path = resolve_runbook_path(name_or_path)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UserError(f"runbook {path}{where} is not valid YAML; fix the file") from None
    except OSError as exc:
        raise UserError(f"cannot read runbook {path}: {exc.strerror}") from None
    return parse_runbook(data, source=str(path))


def parse_runbook(data: object, *, source: str = "<runbook>") -> Runbook:
    if not isinstance(data, dict):
        raise UserError(f"runbook {source} must be a mapping")
    try:
        return Runbook.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (typo?)"
        return _raise(f"runbook {source} is invalid at {_field_path(err)}: {msg}")


def _raise(message: str) -> Runbook:
    raise UserError(message)


# --------------------------------------------------------------------------- named, pinned runbooks
# For callers that must not read arbitrary files (`orchestrate serve`): a runbook is named, never a
# path, comes from RUNBOOK_DIR only, and is pinned by the sha256 of its bytes so that a resumed run
# uses exactly the runbook it started with. Errors name the runbook only: no path, no YAML line.

#: A runbook name: letters, digits, `-` and `_` (no `/`, no `.`: no path, no `..`, no `.yaml`).
RUNBOOK_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")


def runbook_names(directory: Path = RUNBOOK_DIR) -> list[str]:
    """The runbooks `load_runbook_checked` can load from `directory`."""
    return sorted(p.stem for p in directory.glob("*.yaml") if RUNBOOK_NAME_RE.fullmatch(p.stem))


def runbook_identity(rb_path: Path) -> tuple[str, str]:
    """(name, sha256 hex of the file's bytes) of the runbook file at `rb_path`."""
    return Path(rb_path).stem, hashlib.sha256(Path(rb_path).read_bytes()).hexdigest()


def load_runbook_checked(name: str, sha256: str | None = None, *,
                         directory: Path = RUNBOOK_DIR) -> tuple[Runbook, str]:
    """(runbook, sha256) of the runbook called `name` in `directory`, read once and hashed as read.

    `sha256` given: the file must still have that content, else `Refused` (a run is never
    continued with a different runbook than the one it started with).
    """
    known = ", ".join(runbook_names(directory)) or "none"
    unknown = UserError(f"unknown runbook {str(name)[:100]!r}: one of {known}")
    if not isinstance(name, str) or not RUNBOOK_NAME_RE.fullmatch(name):
        raise unknown
    path = directory / f"{name}.yaml"
    try:
        if not path.resolve().is_relative_to(directory.resolve()):
            raise unknown
        raw = path.read_bytes()
    except OSError:
        raise unknown from None
    digest = hashlib.sha256(raw).hexdigest()
    if sha256 is not None and not hmac.compare_digest(digest, str(sha256)):
        raise Refused(f"runbook {name} changed since the run started (sha256 {str(sha256)[:12]}... now {digest[:12]}...): "
                      f"refusing to continue it with another runbook")
    try:
        data = yaml.load(raw.decode("utf-8"), Loader=_LOADER)
    except (yaml.YAMLError, UnicodeDecodeError):
        raise UserError(f"runbook {name} is not valid YAML") from None
    return parse_runbook(data, source=name), digest
