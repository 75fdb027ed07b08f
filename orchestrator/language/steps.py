"""A runbook's steps and the lists they form: `Step` (does one thing or waits on one gate), `Remedy`,
`Rollback`, `Phase`, and the rules of one list of steps (`check_sequence`)."""

from __future__ import annotations

from typing import Literal, TypeVar

from pydantic import Field, model_validator

from orchestrator.analysis.quiet_spec import QuietSpec
from orchestrator.analysis.spec import AnalysisSpec
from orchestrator.analysis.watch_spec import WatchSpec
from orchestrator.language.gate_specs import (
    AttestationSpec,
    EnvSpec,
    HttpJsonSpec,
    ImageSpec,
    ManualSpec,
    ProxyPoolSpec,
    PullRequestSpec,
    QuerySpec,
)
from orchestrator.language.step_specs import (
    SELECTED,
    CacheSpec,
    CaptureSpec,
    ComposeSpec,
    DryRunExpectation,
    LabelsSpec,
    LogsSpec,
    MarkersSpec,
    MetricsSpec,
    OneShotSpec,
    PresenceSpec,
    RelaySpec,
    SoakSpec,
    VerifySpec,
    _Strict,
)

#: the gates outside the engines (orchestrator/language/gate_specs.py)
EXTERNAL_KINDS = ("env", "manual", "proxy_pool", "pull_request", "http_json", "query", "attestation", "image")
#: The step kinds that may be observe-only (`observe: true`): evidence gates that change nothing and
#: that no stop guard, readiness or routing decision reads.
OBSERVABLE_KINDS = ("metrics", "labels", "markers", "presence", "capture", "cache",
                    *(k for k in EXTERNAL_KINDS if k != "manual"))
#: The fields of which a step has exactly one (in the order its error names them).
STEP_KINDS = ("check", "down", "dry_run", "up", "logs", "relay", "verify", "soak", "metrics", "labels", "oneshot", "markers",
              "presence", "capture", "cache", "analysis", "quiet", *EXTERNAL_KINDS)

_Spec = TypeVar("_Spec")


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
    analysis: AnalysisSpec | None = None
    env: EnvSpec | None = None
    manual: ManualSpec | None = None
    proxy_pool: ProxyPoolSpec | None = None
    pull_request: PullRequestSpec | None = None
    http_json: HttpJsonSpec | None = None
    query: QuerySpec | None = None
    attestation: AttestationSpec | None = None
    image: ImageSpec | None = None
    #: a replica's metrics watched while this step runs
    watch: WatchSpec | None = None
    quiet: QuietSpec | None = None
    plan: DryRunExpectation | None = None
    remedy: Remedy | None = None
    #: An observe-only gate (a new check trialled in production): its pass or failure is journaled
    #: and notified, and the run goes on either way. Only on gates that read evidence and are not
    #: what a stop or the capacity promise rests on (OBSERVABLE_KINDS).
    observe: bool = False

    @model_validator(mode="after")
    def _one_thing(self) -> Step:
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
    def kind(self) -> str:
        return next(k for k in STEP_KINDS if getattr(self, k) is not None)

    def spec(self, cls: type[_Spec]) -> _Spec:
        """The spec of the step's kind (`step.metrics` of a metrics step), as the `cls` its handler reads."""
        spec = getattr(self, self.kind)
        if not isinstance(spec, cls):
            raise TypeError(f"step {self.id!r} is a {self.kind} step, not one of {cls.__name__}")
        return spec

    @property
    def compose(self) -> ComposeSpec | None:
        return self.down or self.dry_run or self.up

    @property
    def mutating(self) -> bool:
        return self.kind in ("down", "up")


class Remedy(_Strict):
    """A known fault's own way out, taken instead of the phase's rollback (docs/runbook-language.md).

    When a forward phase's `logs:` gate fails on a forbidden line carrying the text of log marker
    `marker`, it sends REMEDY instead of FAIL: the remedy's `steps` run (checked and executed like any
    other list), then the run goes back to the gate, which reads the log afresh. Why:
    - Back to the gate, not past it: the gate's `ok` stays the one record that the engine passed its
      cold start (journal, `rollout --continue`, `status`), and a second marker line is judged by the
      same gate and the same cap (`max`, kept in `Table.remedy_caps`; past it the marker fails the gate).
    - A failure or abort inside the remedy takes the phase's rollback; a remedy step has no remedy of
      its own and no `check:`; no other gate fails on a log marker, and a rollback's failure halts.
    - A marker whose text is null or contains none of `log_gates.forbidden` could never trigger: refused.
      The key is `marker:`, not `on:` (YAML 1.1 reads a bare `on` as true).
    """

    marker: str = Field(min_length=1)
    max: int = Field(default=1, ge=1, le=5)
    steps: list[Step] = Field(min_length=1)


class Rollback(_Strict):
    steps: list[Step] = Field(default_factory=lambda: [])
    #: rolled_back: the steps undid the phase. halted: a human must act (message required).
    #: aborted: the phase changed nothing that needs undoing (no steps allowed; message
    #: required): the run ends ABORTED, exit 5, e.g. a refusal before the host is touched.
    ends: Literal["rolled_back", "halted", "aborted"]
    #: For `ends: halted|aborted`: what the operator is told. `{host}`, `{run_id}`, `{tag}` are filled in.
    message: str | None = None


class Phase(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str = ""
    replica: str | None = None
    steps: list[Step] = Field(min_length=1)
    rollback: Rollback | None = None
    #: Where `resume --retry` restarts after this phase failed (default: this phase): an earlier forward
    #: phase whose work this one assumes (the base tier's switch restarts at the capacity guard).
    retry_from: str | None = None


def step_at(where: str, i: int, step_id: str | None = None) -> str:
    """The location of the `i`th (0-based) step of the list at `where`, as every runbook error
    names it: counting from 1 as `plan` counts, with the step's id (`phases.canary.steps[4] (apply)`,
    `preflight[2] (budget)`: preflight is itself the list)."""
    return (f"{where}[{i + 1}]" if where == "preflight" else f"{where}.steps[{i + 1}]") + (f" ({step_id})" if step_id else "")


def check_sequence(where: str, steps: list[Step]) -> None:
    """The rules of one list: unique ids, an up preceded by a dry run of the same request, `services:
    selected` after a dry run that selects, a one-shot after the up that starts it."""
    ids: set[str] = set()
    last_dry_run: Step | None = None
    selected_available = False
    started: set[str] = set()
    for i, s in enumerate(steps):
        if s.id in ids:
            raise ValueError(f"{step_at(where, i)}: step id {s.id!r} is used twice")
        ids.add(s.id)
        c = s.compose
        if c is not None and c.services == SELECTED and not selected_available:
            raise ValueError(f"{step_at(where, i, s.id)}: services: selected needs an earlier dry run with select_changed: true")
        if s.dry_run is not None:
            last_dry_run = s
            if s.plan is not None and s.plan.select_changed:
                selected_available = True
        elif s.oneshot is not None and s.oneshot.service not in started:
            raise ValueError(f"{step_at(where, i, s.id)}: oneshot waits for {s.oneshot.service!r}, which no earlier up in "
                             f"this list starts")
        elif s.up is not None:
            if isinstance(s.up.services, list):
                started.update(s.up.services)
            if last_dry_run is None or last_dry_run.dry_run is None or last_dry_run.dry_run.key() != s.up.key():
                raise ValueError(
                    f"{step_at(where, i, s.id)}: an up must be preceded by a dry_run of the same request "
                    f"(same file, services and force_recreate)"
                )
            last_dry_run = None  # one dry run covers one up
        elif s.down is not None:
            last_dry_run = None  # the state changed since the dry run
