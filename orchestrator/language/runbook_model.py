"""The runbook document: `Runbook` and the blocks it holds, the rules that need the whole runbook,
and the queries the rest of the code asks of a loaded runbook."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from orchestrator.analysis.spec import check_against_runbook as _check_analysis
from orchestrator.analysis.spec import check_replicas
from orchestrator.analysis.watch_spec import check_watch as _check_watch
from orchestrator.language.gate_specs import check_against_runbook as _check_gate
from orchestrator.language.step_specs import LogsSpec, Prerequisite, Seconds, _Strict
from orchestrator.language.steps import EXTERNAL_KINDS, Phase, Step, step_at
from orchestrator.language.steps import check_sequence as _check_sequence
from orchestrator.util.user_errors import UserError


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
    cold_start: Seconds
    stop_grace: Seconds
    gone: Seconds
    relay: Seconds
    discovery: Seconds


class LogGates(_Strict):
    #: the ranks of an engine whose cold-start gate says no other (`logs.ranks`, or its budget's)
    ranks: int = Field(gt=0)
    required_per_rank: list[str]
    required: list[str]
    forbidden: list[str]
    #: The line every start of an engine logs first: seen again after its start or its ready line, the
    #: engine restarted inside its container (a cold start that saw it fails; such an engine is not serving).
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

    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

    long: str
    base: str

    def roles(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.model_dump().items()}

    def of(self, role: str) -> str:
        return self.roles()[role]


REPLICA_PREFIX = "replica:"


class Expectation(_Strict):
    """`expects:` in a runbook (docs/runbook-language.md): the part of the new compose file's contract a
    procedure depends on that no gate or declared value states (argv flags, environment, values the file
    must not have). `plan --compose-file` and `ci-preview` compare each entry with the file as compose
    would run it, and fail the pull request with one line per difference."""

    services: list[str] = Field(min_length=1)
    argv: dict[str, str | bool] = Field(default_factory=lambda: {})
    distinct: list[str] = Field(default_factory=lambda: [])
    environment: dict[str, str | None] = Field(default_factory=lambda: {})
    environment_absent: list[str] = Field(default_factory=lambda: [])
    configs_contain: list[str] = Field(default_factory=lambda: [])
    image: str | None = None
    #: why the procedure needs it (shown with every problem this entry finds)
    why: str = Field(min_length=1)
    #: the id of the step that relies on it (the problem line cites that step); else this entry
    relied_on_by: str | None = None

    @field_validator("argv", mode="before")
    @classmethod
    def _flags(cls, v: object) -> object:
        if isinstance(v, dict):
            for flag, value in v.items():
                if not str(flag).startswith("-"):
                    raise ValueError(f"argv: {flag!r} is not a flag (flags start with -)")
                if isinstance(value, int | float) and not isinstance(value, bool):
                    raise ValueError(f"argv: {flag}: quote the value ({value!r} -> \"{value}\"): argv is text")
        return v

    @field_validator("environment", mode="before")
    @classmethod
    def _texts(cls, v: object) -> object:
        if isinstance(v, dict):
            for name, value in v.items():
                if isinstance(value, int | float | bool):
                    raise ValueError(f"environment: {name}: quote the value ({value!r}): the environment is text")
        return v

    def check_against(self, here: str, replicas: dict[str, list[str]]) -> None:
        """The rules that need the runbook: the replicas it names exist. (`relied_on_by` naming no
        step is the compose-file check's problem, not the loader's: a runbook derived from another
        with fewer steps still loads, and the check says which entry cites nothing.)"""
        for s in self.services:
            if s.startswith(REPLICA_PREFIX) and s[len(REPLICA_PREFIX):] not in replicas:
                raise ValueError(f"{here}.services: {s!r} names no replica of replicas: ({', '.join(replicas) or 'none'})")
        if not (self.argv or self.distinct or self.environment or self.environment_absent or self.configs_contain or self.image):
            raise ValueError(f"{here}: an expectation needs argv, distinct, environment, environment_absent, "
                             f"configs_contain or image (it would check nothing)")
        if self.distinct and len(self.services) < 2 and not any(s.startswith(REPLICA_PREFIX) for s in self.services):
            raise ValueError(f"{here}.distinct: values differ between several services: list more than one")


class Runbook(_Strict):
    name: str
    title: str
    hosts: list[str] = Field(min_length=1)
    file: str
    #: Other compose files this runbook deploys (its rollbacks' previous files): with `file`, how CI
    #: finds the runbooks a changed file affects (`ci_preview.runbooks_affected_by`).
    deploys: list[str] = Field(default_factory=lambda: [])
    model: str
    #: Hugging Face repos (`org/name`) the new file's engines load: `plan --live` asks the host's
    #: model cache whether it holds them (missing weights mean a download before the cold start).
    weights: list[str] = Field(default_factory=lambda: [])
    #: replica -> the GPU indexes its engine holds (`GET /host/gpu`): an engine's down is sent only
    #: while no other engine holds them, its gate passes only once none does. Monitoring containers
    #: that see every GPU (the DCGM exporter) are not engines.
    replica_gpus: dict[str, list[int]] = Field(default_factory=lambda: {})
    domains: Domains
    #: The HiCache host-RAM budget (none without HiCache); `check: budget` and `logs: {budget: true}` need it.
    budget: Budget | None = None
    #: `budget:` written as a list: its first item is `budget`, the rest land here. Each has its own
    #: variable and engines; the budget gate fits all of them together in the host's RAM.
    more_budgets: list[Budget] = Field(default_factory=lambda: [])
    timeouts: Timeouts
    log_gates: LogGates
    preflight: list[Step]
    phases: list[Phase] = Field(min_length=1)
    full_rollback: list[Phase] = Field(default_factory=lambda: [])
    #: service -> why it is safe that a rollback leaves it on the new file (a forward step recreated
    #: it; the rollback does not undo that), named in the rollback's last line.
    rollback_keeps: dict[str, str] = Field(default_factory=lambda: {})
    #: replica -> the engine services that can serve as it (every definition, old and new). An
    #: engine is stopped only while it does not serve or another replica serves.
    replicas: dict[str, list[str]] = Field(default_factory=lambda: {})
    #: The orchestrator's own tag check (compose-manager's is off in production): the tag is merged
    #: to main in the compose-files repository and its commit at least this old.
    min_tag_age: Seconds = 48 * 3600.0
    #: The host states the runbook recognises (before / part-way / at target), checked in order.
    host_states: list[HostState] = Field(default_factory=lambda: [])
    #: replica -> key -> the value the new file declares (its telemetry), checked by labels gates.
    replica_values: dict[str, dict[str, str]] = Field(default_factory=lambda: {})
    #: Named log markers for `markers:` gates. null = the exact line is not known: the gate reports
    #: the marker as not checked instead of inventing a string.
    log_markers: dict[str, str | None] = Field(default_factory=lambda: {})
    #: Other hosts' runs that must be DONE and soaked first (`check: prerequisites`, fleet runs).
    prerequisites: list[Prerequisite] = Field(default_factory=lambda: [])
    #: Who carries the traffic while an engine is stopped. `host` (gpu02): another replica of the
    #: same host (the stop guard). `fleet` (the base tier, whose host moves as a whole): the other
    #: hosts of `hosts:`, after the run's host is withdrawn from every domain on every model-proxy
    #: peer (the drain, confirmed first by a `presence: {hosts: others}` gate).
    capacity: Literal["host", "fleet"] = "host"
    #: The rest of the new file's contract the procedure depends on (`Expectation`).
    expects: list[Expectation] = Field(default_factory=lambda: [])

    @field_validator("file", "deploys")
    @classmethod
    def _relative(cls, v: str | list[str]) -> str | list[str]:
        for f in [v] if isinstance(v, str) else v:
            if not f or f.startswith("/") or ".." in Path(f).parts:
                raise ValueError(("file" if isinstance(v, str) else f"deploys: {f!r}")
                                 + " must be a relative path inside the compose-files repository")
        return v

    @model_validator(mode="before")
    @classmethod
    def _budget_list(cls, data: object) -> object:
        if isinstance(data, dict) and "more_budgets" in data:
            raise ValueError("more_budgets: write several budgets as budget: [ ... ] (a list)")
        if isinstance(data, dict) and isinstance(data.get("budget"), list):
            items = data["budget"]
            if not items:
                raise ValueError("budget: an empty list; omit budget: for a tier without HiCache")
            return {**data, "budget": items[0], "more_budgets": items[1:]}
        return data

    @model_validator(mode="after")
    def _rules(self) -> Runbook:
        for p in self.preflight:
            if p.mutating:
                raise ValueError(f"preflight step {p.id!r} must not mutate (no down/up in preflight)")
        _check_sequence("preflight", self.preflight)
        self._check_budgets()
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
                raise ValueError(f"host_states[{i + 1}] ({hs.name}): action must be start, done or a phase name, not {hs.action!r}")
        for lists_where, steps in self._named_step_lists():
            for i, st in enumerate(steps):
                here = step_at(lists_where, i, st.id)
                if st.remedy is not None:
                    self._check_remedy(here, st, forward=lists_where in forward)
                if self.budget is None and (st.check == "budget" or (st.logs is not None and st.logs.budget)):
                    raise ValueError(f"{here}: a budget check needs the runbook's budget: block")
                if st.logs is not None and st.logs.budget and st.logs.ranks is not None:
                    b = self.budget_of(st.logs.service)
                    if b is not None and st.logs.ranks != b.ranks_per_replica:
                        raise ValueError(f"{here}.logs.ranks: {st.logs.ranks} ranks, but the budget of {st.logs.service} "
                                         f"({b.variable}) splits over ranks_per_replica: {b.ranks_per_replica}; drop ranks: "
                                         f"(a budget gate's ranks are its budget's)")
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
                if st.quiet is not None and self.replicas:
                    check_replicas(here, "quiet.relay.ports", st.quiet.relay.ports, self.replicas)
                if st.watch is not None:
                    _check_watch(here, st.kind, st.watch, self.replicas)
                if st.kind in EXTERNAL_KINDS:
                    _check_gate(here, getattr(st, st.kind), self.replicas, self.replica_values)
                if st.labels is not None:
                    vals = self.replica_values.get(st.labels.replica)
                    if vals is None:
                        raise ValueError(f"{here}: labels.replica {st.labels.replica!r} has no replica_values entry")
                    for key in [*st.labels.log_tags, *st.labels.otel_labels, *st.labels.metric_labels]:
                        if key not in vals:
                            raise ValueError(f"{here}: replica_values.{st.labels.replica} has no {key!r}")
        for lists_where, steps in self._named_step_lists():
            for i, st in enumerate(steps):
                self._check_force_recreate(step_at(lists_where, i, st.id), st)
        for svc in self.rollback_keeps:
            if svc in self.engines():
                raise ValueError(f"rollback_keeps.{svc}: an engine never stays on the new file after a rollback")
        for i, ex in enumerate(self.expects):
            ex.check_against(f"expects[{i + 1}]", self.replicas)
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
                raise ValueError(f"{step_at(where, j, rs.id)}: a remedy step has no remedy of its own (a failure in a "
                                 f"remedy takes the phase's rollback)")
            if rs.check is not None:
                raise ValueError(f"{step_at(where, j, rs.id)}: check: is a preflight step, not a remedy step")
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
        return next((replica for replica, engines in self.replicas.items() if service in engines), None)

    def _check_budgets(self) -> None:
        seen_var: dict[str, int] = {}
        seen_engine: dict[str, int] = {}
        for i, b in enumerate(self.budgets()):
            if b.variable in seen_var:
                raise ValueError(f"budget[{i + 1}]: variable {b.variable} is also budget[{seen_var[b.variable] + 1}]'s "
                                 f"(each budget is set by its own env-map variable)")
            seen_var[b.variable] = i
            for e in b.engines:
                if e in seen_engine:
                    raise ValueError(f"budget[{i + 1}]: engine {e} is also in budget[{seen_engine[e] + 1}] "
                                     f"(an engine reads one budget)")
                seen_engine[e] = i

    def ranks_of(self, logs: LogsSpec) -> int:
        """How many ranks of `logs.service` log each per-rank milestone: the gate's `ranks:`, else
        with `budget: true` its budget's `ranks_per_replica` (the ranks that budget is split over),
        else `log_gates.ranks`."""
        if logs.ranks is not None:
            return logs.ranks
        b = self.budget_of(logs.service) if logs.budget else None
        return b.ranks_per_replica if b is not None else self.log_gates.ranks

    def budgets(self) -> list[Budget]:
        """Every HiCache budget of the runbook (none, one, or the list `budget:` was written as)."""
        return ([self.budget] if self.budget is not None else []) + list(self.more_budgets)

    def budget_of(self, service: str) -> Budget | None:
        """The budget whose engines name `service`; else the first (a single budget's rule)."""
        return next((b for b in self.budgets() if service in b.engines), self.budget)

    def identifiers(self) -> list[str]:
        """The runbook's own names (its files and services): a redactor never takes a value
        inside one of them for a secret, so what the journal keeps of them stays exact."""
        return [self.file, *self.deploys, *self.engines(), *self.previous_refs(), *sorted(self.oneshot_services())]

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
        return list(dict.fromkeys(s.compose.file.split(":", 1)[1] for steps in self.step_lists() for s in steps
                                  if s.compose is not None and s.compose.file.startswith("previous:")))

    def _named_step_lists(self) -> list[tuple[str, list[Step]]]:
        out = [("preflight", self.preflight)]
        for ph in self.phases:
            out.append((f"phases.{ph.name}", ph.steps))
            if ph.rollback:
                out.append((f"phases.{ph.name}.rollback", ph.rollback.steps))
        out += [(f"full_rollback.{ph.name}", ph.steps) for ph in self.full_rollback]
        return out + [(f"{step_at(where, i, st.id)}.remedy", st.remedy.steps)
                      for where, steps in out for i, st in enumerate(steps) if st.remedy is not None]

    def inventory_problem(self, host: str, inventory_hosts: Collection[str], has_prometheus: bool) -> str | None:
        """The first thing the runbook needs of the inventory that it lacks for a run of `host` (another
        host's env map, a `prometheus_url`, the hosts a `prometheus.replicas` matcher names), in one line
        naming what to fix; None: nothing. Checked before anything reads a host: an offline `plan` and a
        run's start say it (exit 2) instead of a gate failing half-way through a run."""
        for where, steps in self._named_step_lists():
            for i, st in enumerate(steps):
                env = st.manual.verify.env if st.manual is not None else st.env
                if env is not None and env.host != "this" and env.host not in inventory_hosts:
                    return (f"runbook {self.name}'s {step_at(where, i, st.id)} reads the env map of host {env.host!r}, "
                            f"which the inventory does not list ({', '.join(sorted(inventory_hosts)) or 'none'}): fix "
                            f"env.host or add the host to the inventory")
                # with source: prometheus, the analysis always has its query (defaulted when not written)
                q = st.analysis.prometheus if st.analysis is not None and st.analysis.source == "prometheus" else None
                reads = ("a query: gate" if st.query is not None
                         else "metrics with source: prometheus" if q is not None else None)
                for other in (q.hosts() if q is not None else []):
                    if other not in inventory_hosts:
                        return (f"runbook {self.name}'s {step_at(where, i, st.id)} reads a replica on host {other!r} "
                                f"(prometheus.replicas' host=\"{other}\"), which the inventory does not list "
                                f"({', '.join(sorted(inventory_hosts)) or 'none'}): fix the matcher or add the host")
                if reads is not None and not has_prometheus:
                    return (f"runbook {self.name}'s {step_at(where, i, st.id)} reads {reads}, but the inventory names no "
                            f"prometheus_url for {host}: add it to the host's entry"
                            + (" or use source: relay" if st.analysis is not None else ""))
        return None

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
