"""The live services a step handler acts through (`Runtime`): the one place effects happen.

`Runtime` is built from parts, dataclasses whose fields are the clients and the parts above them
that they use; handlers see only the operations of `engine.steps.activities.Activities`.

Rules (each pinned by a test in tests/executor/):
- a mutating call is journaled as an intent before it is sent and an outcome after; on resume an
  intent without an outcome is settled by observation, never sent again;
- serving is the three-valued model of engine/rules/serving_evidence.py; `stop_guard` never lets
  "unknown" permit a stop;
- a dry run that changed docker/ps halts the run (docker/compose#14029);
- an abort is honoured between polls, never beside a call whose outcome is not known yet.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any, TypeVar

import structlog

from orchestrator.engine import leave_pool
from orchestrator.engine.context import ActionMark, DryRunRecord, RunContext
from orchestrator.engine.executor.placement import PlacementError, observe_host
from orchestrator.engine.progress import Progress
from orchestrator.engine.rules import ownership
from orchestrator.engine.rules.approval_scope import effective
from orchestrator.engine.rules.foreign_change import (
    foreign_message,
    new_mark,
    own_call,
    refuse_foreign_part_way,
    since_mark,
    unexplained,
)
from orchestrator.engine.rules.serving_evidence import (
    RELAY_SEEN,
    LogWindow,
    Peers,
    Verdict,
    base_verdict,
    from_docker,
    from_log,
    judge,
    publishes,
    relay_word,
    stop_refusal,
    up_seconds,
)
from orchestrator.engine.rules.targets import group_targets, journaled_successes, newest_successful, recorded_successes
from orchestrator.engine.steps.outcome import StepOutcome, fail, halt, lock_held, ok
from orchestrator.hosts.clients.compose_manager import ComposeRequest, StreamOutcome
from orchestrator.hosts.clients.errors import (
    BadRequest,
    Busy,
    ClientError,
    ServerError,
    TagNotFound,
    TagTooRecent,
    TransportError,
)
from orchestrator.hosts.clients.model_proxy import split_host
from orchestrator.hosts.envmap import EnvMap
from orchestrator.hosts.host_clients import HostClients
from orchestrator.hosts.inventory import HostEntry
from orchestrator.hosts.logfollow import LogFollower
from orchestrator.hosts.parsers.docker_ps import Container, by_service, snapshot
from orchestrator.hosts.parsers.dry_run import parse_dry_run
from orchestrator.hosts.ps_compare import compare_ps, describe_changes, split_by_definition
from orchestrator.hosts.redaction import Redactor
from orchestrator.journal.base import EffectRecord, Lease, RunRecord
from orchestrator.journal.sql import Journal
from orchestrator.language.machine import Event, Node, Table
from orchestrator.language.references import resolve_file, resolve_services
from orchestrator.language.runbook import Runbook, Step
from orchestrator.util.clock import Clock
from orchestrator.util.durations import format_duration

log = structlog.get_logger("orchestrator.executor")
T = TypeVar("T")

#: A heartbeat line during a long wait, on the run's clock.
HEARTBEAT_S = 300.0
#: Log probes closer than this in real time are not sent (see RunClock.wait_for_output).
MIN_PROBE_REAL_S = 0.01
#: The first window of an engine's log: a whole cold start, so a resumed gate reads its first line.
COLD_START_WINDOW = 4000
#: The window a serving check reads (the ready line must be in it, with no later startup line).
SERVING_WINDOW = 5000
#: How long an unknown `up` is observed without `GET /status` before it is judged not applied (a pull).
SETTLE_S = 600.0
#: How many times a down is sent again when observation shows a zombie or no effect.
MAX_DOWN_RESENDS = 2

#: The journaled parts of the context and of an effect's outcome that are text for a person: scrubbed.
#: The run's data (targets, tags, IDs, the action-log mark, a request as sent) stays exact: a
#: rollback must find what it names even when a secret happens to equal it.
CONTEXT_TEXT = (("failure",), ("not_stopped",), ("before", "completion"))
OUTCOME_TEXT = ("lines", "error", "reason")


class AbortRequested(Exception):
    pass


class MaskedEnv(Exception):
    """The env map read mid-run holds masked credentials: halt, send nothing."""


class ForeignChange(Exception):
    """compose-manager's action log holds a call this run did not make: halt, send nothing."""


@dataclass
class DryRunCall:
    """What sending a dry run gave: `verdict` done (see `stream`), or an outcome to return."""

    verdict: str
    stream: StreamOutcome | None = None
    after: list[Container] | None = None
    outcome: StepOutcome | None = None


# -- the run's position and voice ----------------------------------------------------------------

@dataclass(eq=False)
class Visit:
    """The run loop's position: its bound logger, node, and the visit key effects are journaled under."""

    log: Any
    node: Node | None = None
    key: str = ""


@dataclass(kw_only=True, eq=False)
class Voice:
    """What the run says while it works: progress events (on the run's clock) and scrubbed text."""

    progress: Progress
    redactor: Redactor
    clock: Clock

    def scrub(self, text: str) -> str:
        return self.redactor.scrub(text or "")

    def scrub_lines(self, lines: Sequence[str]) -> list[str]:
        """Scrubbed together: a secret split across two lines is hidden whole."""
        return self.redactor.scrub_lines(list(lines))

    def may_begin_secret(self, line: str) -> bool:
        return self.redactor.may_begin_secret(line)

    def emit(self, kind: str, **fields: Any) -> None:
        """Tell the watchers, every field scrubbed. A failing watcher is logged, never stops the run
        (it may be between a stop and its replacement)."""
        try:
            self.progress.event(kind, clock=self.clock.monotonic(), **self.redactor.scrub_obj(fields))
        except Exception as exc:  # noqa: BLE001  # any watcher's failure, by the rule above
            log.warning("progress_hook_failed", kind=kind, error=self.scrub(f"{type(exc).__name__}: {exc}")[:300])


@dataclass(kw_only=True, eq=False)
class RunClock:
    """The run's time: polls, log probes during a poll, heartbeat lines, the abort check."""

    #: run-clock seconds between log probes in `wait_for_output` (set by the runner); 0: none
    log_probe_interval: float = 0.0

    clock: Clock
    poll: float
    table: Table
    journal: Journal
    run_id: str
    visit: Visit
    voice: Voice
    _hb_next: float = field(default=0.0, init=False)

    def check_abort(self) -> None:
        node = self.visit.node
        if node is not None and self.table.allows(node.id, Event.ABORT) and self.journal.abort_requested(self.run_id):
            raise AbortRequested()

    async def wait(self, seconds: float | None = None, *, abortable: bool = True) -> None:
        """Sleep a poll. `abortable=False` while a sent call is settled: its abort waits for the outcome."""
        await self.clock.sleep(self.poll if seconds is None else seconds)
        if abortable:
            self.check_abort()

    async def wait_for_output(self, follower: LogFollower, until: float | None = None) -> str:
        """`wait()` until `until` (default: a poll), probing the log (`--tail 1`) every
        `log_probe_interval` so a failure line is seen within seconds. "news": a probe showed an
        unread line; "quiet": the probes ran to the end and showed none (the caller may skip its
        log read); "unprobed": no probes (none configured, one failed, or closer than
        MIN_PROBE_REAL_S of real time in a time-compressed simulation)."""
        step = self.log_probe_interval
        end = until if until is not None else self.clock.monotonic() + self.poll
        real = getattr(self.clock, "real_seconds", None)
        outcome = "unprobed"
        failed = False
        while (left := end - self.clock.monotonic()) > 0:
            if step <= 0 or failed or (real is not None and real(step) < MIN_PROBE_REAL_S):
                outcome = "unprobed"
                await self.clock.sleep(left)
                break
            await self.clock.sleep(min(step, left))
            try:
                if await follower.probe():
                    outcome = "news"
                    break
                outcome = "quiet"
            except ClientError:
                failed = True
                outcome = "unprobed"
        self.check_abort()
        return outcome

    def start_heartbeat(self) -> float:
        """A long wait begins (first heartbeat in HEARTBEAT_S). Returns now."""
        now = self.clock.monotonic()
        self._hb_next = now + HEARTBEAT_S
        return now

    def tick(self, what: str, started: float, timeout: float | None, extra: Callable[[], dict[str, Any]] | None = None) -> None:
        """A heartbeat line every HEARTBEAT_S; `extra` is called only when one is due."""
        now = self.clock.monotonic()
        if now < self._hb_next:
            return
        self._hb_next = now + HEARTBEAT_S
        self.voice.emit("heartbeat", what=what, elapsed=now - started, timeout=timeout, **(extra() if extra else {}))


@dataclass(kw_only=True, eq=False)
class RunJournal:
    """This run's records in the journal: its context, approvals and the effects of the visit."""

    journal: Journal
    lease: Lease  # renewed by the heartbeat: the run loop sets the current one
    run: RunRecord
    ctx: RunContext
    redactor: Redactor
    visit: Visit

    def context_json(self) -> dict[str, Any]:
        """The context as journaled: its `CONTEXT_TEXT` scrubbed, the rest exact."""
        data = self.ctx.to_json()
        for *path, key in CONTEXT_TEXT:
            part = data
            for name in path:
                part = part.get(name) or {}
            if part.get(key):
                part[key] = self.redactor.scrub_obj(part[key])
        return data

    def save_context(self) -> None:
        self.journal.update_context(self.lease, self.run.run_id, self.context_json())

    def approvals(self) -> set[str]:
        """Every named gate approved; a `*` only if given after the run's latest resume or adoption."""
        return effective(self.journal, self.run.run_id)

    def approve(self, gate: str, by: str) -> None:
        self.journal.approve(self.run.run_id, gate, by=by)

    def effects(self) -> list[EffectRecord]:
        return self.journal.effects(self.run.run_id)

    def last_effect_id(self) -> int:
        return max((e.effect_id for e in self.effects()), default=0)

    def record_intent(self, kind: str, body: dict[str, Any], *, mutating: bool = True) -> EffectRecord:
        """Journaled (under this visit's key) before the call is sent; `body` exact."""
        return self.journal.record_intent(self.lease, self.run.run_id, self.visit.key, kind, body, mutating=mutating)

    def record_outcome(self, effect_id: int, outcome: dict[str, Any]) -> None:
        scrubbed = {k: self.redactor.scrub_obj(v) if k in OUTCOME_TEXT else v for k, v in outcome.items()}
        self.journal.record_outcome(self.lease, self.run.run_id, effect_id, scrubbed)

    def journal_dry_run(self, req: ComposeRequest, stream: StreamOutcome, **extra: Any) -> None:
        """Journaled after the fact (nothing to reconcile on resume): status, exit code, last 40 lines."""
        outcome = {"status": stream.status, "exit_code": stream.exit_code, "lines": stream.lines[-40:], **extra}
        self.record_outcome(self.record_intent("dry_run", req.redacted(), mutating=False).effect_id, outcome)

    def visit_effects(self, prefix: str) -> list[EffectRecord]:
        return [e for e in self.effects() if e.step == self.visit.key and e.kind.startswith(prefix)]

    def recorded_effect(self, kind: str) -> EffectRecord | None:
        """The effect of `kind` this visit already journaled (a resume)."""
        return next((e for e in reversed(self.visit_effects(kind)) if e.kind == kind), None)

    async def resume_effect(self, eff: EffectRecord) -> dict[str, Any]:
        """A call journaled before a resume: its outcome, or "unknown" (recorded so; settled by
        observation, never sent again)."""
        baseline = dict(eff.request.get("baseline", {}))
        if eff.outcome is not None:
            self.visit.log.info("effect_reused", kind=eff.kind, status=eff.outcome.get("status"))
            return dict(eff.outcome) | {"baseline": baseline}
        self.visit.log.warning("effect_outcome_unknown_after_crash", kind=eff.kind)
        outcome = {"status": "unknown", "error": "the runner stopped after sending; outcome not recorded"}
        self.record_outcome(eff.effect_id, outcome)
        return outcome | {"baseline": baseline}


# -- reads ---------------------------------------------------------------------------------------

@dataclass(kw_only=True, eq=False)
class EnvReader:
    """The host's env map from the dashboard; its secrets join the redactor as they are read."""

    dashboard: Any
    instance_names: dict[str, str]
    entry: HostEntry
    redactor: Redactor
    ctx: RunContext
    voice: Voice
    visit: Visit
    #: the host's own names (host, files, tags, services): never secrets, so journaled exact
    identifiers: tuple[str, ...] = ()
    env: EnvMap | None = field(default=None, init=False)  # as last read

    def _secrets_of(self, env: EnvMap) -> frozenset[str]:
        known = self.identifiers + tuple(str(v) for ref in self.ctx.previous.values() if isinstance(ref, dict)
                                         for v in (ref.get("file"), ref.get("tag")) if v)
        return env.redaction_values(secret_keys=self.entry.secret_keys, identifiers=known)

    async def read_env(self) -> EnvMap:
        env = await self.dashboard.env_map(name=self.entry.instance_name)
        self.redactor.add(*self._secrets_of(env))
        fp = env.keys_fingerprint()
        if self.ctx.env_keys_fingerprint and self.ctx.env_keys_fingerprint != fp:
            self.visit.log.warning("env_map_keys_changed", keys=len(env))
            self.voice.emit("note", text="the host's env map keys changed since the run started; the map as read now is passed whole")
        self.ctx.env_keys_fingerprint = fp
        self.ctx.env_keys = len(env)
        self.env = env
        return env

    async def ensure_env(self) -> EnvMap:
        if self.env is None:
            env = await self.read_env()
            masked = env.masked_credentials(secret_keys=self.entry.secret_keys)
            if masked:
                raise MaskedEnv(f"the env map of {self.entry.instance_name} now holds masked or placeholder values for "
                                f"{', '.join(masked)}: nothing more is sent; fix them in the dashboard, then resume")
        assert self.env is not None
        return self.env

    async def other_env(self, host: str) -> EnvMap:
        """Another inventory host's env map; LookupError: not in the inventory."""
        name = self.instance_names.get(host)
        if name is None:
            raise LookupError(f"host {host!r} is not in the inventory (its env map cannot be read)")
        env = await self.dashboard.env_map(name=name)
        self.redactor.add(*self._secrets_of(env))
        return env


@dataclass(kw_only=True, eq=False)
class HostReads:
    """What a handler reads from the host (compose-manager, the inference route, the relay); nothing
    here changes the host."""

    compose: Any
    inference: Any
    relay: Callable[[str, str], Any]
    prometheus: Callable[[str], Any]
    entry: HostEntry
    rb: Runbook
    ctx: RunContext
    voice: Voice
    _previous_ref_of: dict[str, str] = field(init=False)
    #: the action log `action_count` just read: the foreign-change check of the call that follows takes it
    fresh_actions: list[Any] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._previous_ref_of = self.rb.previous_ref_of()  # read on every log poll: once per run

    async def ps(self) -> list[Container]:
        return await self.compose.ps(self.entry.project)

    async def action_log(self) -> list[Any]:
        return await self.compose.action_log()

    async def action_count(self) -> int:
        actions = await self.compose.action_log()
        self.fresh_actions = actions
        return len(actions)

    async def version_summary(self) -> dict[str, Any]:
        try:
            return {k: v for k, v in (await self.compose.version()).items() if k in ("tag", "commit", "file")}
        except ClientError as exc:
            return {"error": type(exc).__name__}

    async def _project_version(self) -> Any | None:
        """`/version` projects.<p> (None: not offered, or it could not be read)."""
        try:
            return (await self.compose.version()).project(self.entry.project)
        except ClientError:
            return None

    async def success_record(self) -> list[Any] | None:
        """`/version` projects.<p>.current/previous: rewritten only when an up succeeded."""
        proj = await self._project_version()
        if proj is None:
            return None
        return [None if r is None else {k: getattr(r, k, None) for k in ("tag", "file", "commit")}
                for r in (proj.current, proj.previous)]

    async def successful_deploys(self, journal: Journal, host: str) -> set[tuple[str, str]]:
        """(tag, file) of every up compose-manager's record or the journal saw succeed."""
        return recorded_successes(await self._project_version()) | journaled_successes(journal, host)

    async def in_flight(self) -> bool | None:
        """compose-manager's own word on whether an operation is still running (None: cannot say)."""
        try:
            return await self.compose.status() is not None
        except ClientError:
            return None

    async def offered(self, name: str) -> Any | None:
        """compose-manager's read `name`, or None where it does not offer it (or it failed)."""
        try:
            return await getattr(self.compose, name)()
        except ClientError:
            return None

    async def host_cache(self) -> Any | None:
        return await self.offered("host_cache")

    async def gpu_holders(self, replica: str | None) -> dict[int, set[str]] | None:
        """GPU index -> the containers holding it, for the replica's GPUs (None: not offered)."""
        gpus = self.rb.replica_gpus.get(replica or "")
        if not gpus or (info := await self.offered("host_gpu")) is None:
            return None
        by_index = {g.index: set(g.claimed_by) for g in info}
        return {i: by_index.get(i, set()) for i in gpus}

    async def attestation_report(self) -> dict[str, Any]:
        return await self.compose.attestation_report()

    async def completion_once(self) -> dict[str, Any]:
        try:
            done = await self.inference.completion(
                self.rb.model, [{"role": "user", "content": "Reply with the word ready."}], max_tokens=8
            )
            return {"ok": True, "prompt_tokens": done.prompt_tokens}
        except ClientError as exc:
            return {"ok": False, "reason": self.voice.scrub(f"{type(exc).__name__}: {exc}")}

    async def cache_hit_check(self) -> Any:
        return await self.inference.cache_hit_check(self.rb.model)

    def relay_client(self, port: int, token: str) -> Any:
        return self.relay(self.entry.relay_url(port), token)

    def prometheus_client(self) -> Any:
        assert self.entry.prometheus_url is not None
        return self.prometheus(str(self.entry.prometheus_url))

    def known_file(self, service: str) -> str | None:
        """The file that deployed `service` as this run knows it, else the file of the `previous:`
        reference that names it (the base tier's FP8 r2 comes with `previous:...-r1`)."""
        known = (self.ctx.deployed.get(service) or self.ctx.previous.get(service)
                 or self.ctx.previous.get(self._previous_ref_of.get(service, "")))
        return known["file"] if known else None

    def service_file(self, service: str) -> str:
        return self.known_file(service) or self.rb.file

    # Log text is read raw: a gate judges what the engine wrote (a secret equal to a ready line must
    # not change a verdict); whoever shows a line scrubs it there (`Voice.scrub_lines`).

    async def raw_log(self, service: str, tail: int) -> str:
        return await self.log_through(self.service_file(service), service, tail)

    async def log_through(self, file: str, service: str, tail: int) -> str:
        return await self.compose.logs(file, [service], tail, self.entry.project)

    def raw_follower(self, service: str) -> LogFollower:
        file = self.service_file(service)
        return LogFollower(lambda tail: self.log_through(file, service, tail), initial_tail=COLD_START_WINDOW, max_tail=5000)

    async def oneshots_ran(self, services: list[str]) -> bool:
        """Every one of `services` is a one-shot whose container left output (it ran)."""
        oneshots = self.rb.oneshot_services()
        if not services or any(s not in oneshots for s in services):
            return False
        for s in services:
            try:
                text = await self.raw_log(s, 50)
            except ClientError:
                return False
            if not text.strip():
                return False
        return True


@dataclass(kw_only=True, eq=False)
class Neighbours:
    """The model-proxy peers, asked about this host or the tier's others, and the inventory's addresses."""

    peers: list[Any]
    addresses: dict[str, str]
    entry: HostEntry
    rb: Runbook
    run: RunRecord

    def address_of(self, host: str) -> str | None:
        return self.addresses.get(host)

    async def peer_presence(self) -> tuple[dict[str, Any], list[str]]:
        """Each peer's listing of this host under the long and base domains, and the problems
        (it must be listed healthy under the long domain, and not under the base)."""
        addr = self.entry.model_proxy_address
        peers: dict[str, Any] = {}
        problems = []
        for peer in self.peers:
            for label, domain in (("long", self.rb.domains.long), ("base", self.rb.domains.base)):
                p = await peer.presence(addr, domain)
                peers[f"{peer.name}/{label}"] = {"listed": p.listed, "healthy": p.healthy}
            if not (peers[f"{peer.name}/long"]["listed"] and peers[f"{peer.name}/long"]["healthy"]):
                problems.append(f"{peer.name} does not list {addr} healthy under {self.rb.domains.long}")
            if peers[f"{peer.name}/base"]["listed"]:
                problems.append(f"{peer.name} lists {addr} under the base domain {self.rb.domains.base}")
        return peers, problems

    async def presence_problems(self, targets: dict[str, str], listed: list[str], absent: list[str]) -> list[str]:
        """Against a `presence:` gate: each target (host -> address) listed healthy under each `listed`
        role's domain, on no port under each `absent` one. A peer that does not answer raises."""
        problems: list[str] = []
        for peer in self.peers:
            for host, addr in targets.items():
                for role in listed:
                    got = await peer.presence(addr, self.rb.domains.of(role))
                    if not (got.listed and got.healthy):
                        problems.append(f"{peer.name} does not list {host} ({addr}) healthy under {self.rb.domains.of(role)}")
                for role in absent:  # any port of the host: a registration on another port is not a drain
                    got = await peer.presence(split_host(addr), self.rb.domains.of(role))
                    if got.listed:
                        problems.append(f"{peer.name} still lists {host} ({addr}) under {self.rb.domains.of(role)}")
        return problems

    async def peers_view(self) -> Peers:
        """Does every peer list this host healthy under one of the runbook's domains? A peer that
        cannot be asked leaves it undecided (None)."""
        addr = split_host(self.entry.model_proxy_address)
        if not self.peers:
            return Peers(None, "no model-proxy peer is configured")
        missing = []
        for peer in self.peers:
            for domain in self.rb.domains.roles().values():
                try:
                    got = await peer.presence(addr, domain)
                except ClientError as exc:
                    return Peers(None, f"model-proxy {peer.name} could not be asked ({type(exc).__name__})")
                if got.listed and got.healthy:
                    break
            else:
                missing.append(peer.name)
        if missing:
            return Peers(False, f"{', '.join(missing)} does not list {addr} healthy")
        names = " and ".join(p.name for p in self.peers)
        return Peers(True, f"the model-proxy peers ({names}) route to {addr}")

    async def still_listed(self) -> list[str]:
        """Where a peer still lists this host (empty: drained). A peer that cannot be asked counts
        as listing it: never stop blind."""
        addr = split_host(self.entry.model_proxy_address)  # any port: the registrar's may differ from ours
        out: list[str] = []
        for peer in self.peers:
            for domain in self.rb.domains.roles().values():
                try:
                    got = await peer.presence(addr, domain)
                except ClientError as exc:
                    out.append(f"{peer.name} could not be asked about {domain} ({type(exc).__name__})")
                    continue
                if got.listed:
                    out.append(f"{peer.name} lists {addr} under {domain}")
        return out

    async def tier_refusal(self, journal: Any, run_id: str | None = None) -> tuple[str, str] | None:
        """(the other host of the tier that is out, why), read live (orchestrator/engine/leave_pool.py)."""
        return await leave_pool.tier_refusal(journal=journal, rb=self.rb, host=self.run.host, peers=self.peers,
                                             addresses=self.addresses, run_id=run_id)


@dataclass(kw_only=True, eq=False)
class ForeignChecks:
    """What compose-manager did that this run does not explain (engine/rules/foreign_change.py)."""

    compose: Any
    reads: HostReads
    records: RunJournal
    rb: Runbook
    run: RunRecord
    ctx: RunContext
    voice: Voice

    async def foreign_in_flight(self) -> str | None:
        """Before a run sends anything: an operation compose-manager runs now is someone else's
        (an unsettled call of this journal is resumed first). The refusal, or None."""
        if any(e.mutating for e in self.records.effects()):
            return None
        try:
            st = await self.compose.status()
        except BadRequest as exc:
            if exc.status in (404, 405):  # a compose-manager without GET /status: the action log still guards every call
                return None
            raise
        if st is None:
            return None
        what = f"{st.action} of {', '.join(st.services) or 'every service'}" + (f" ({st.file}@{st.tag})" if st.file else "")
        return (f"compose-manager on {self.run.host} is running {what} since {st.started_at or 'an unknown time'}, which no run of "
                f"this journal sent: another orchestrator or a person is acting on the host; nothing was changed")

    async def foreign_part_way(self) -> str | None:
        """A part-way host whose target calls no run of this journal made: the refusal, or None."""
        actions = await self.reads.action_log()
        return refuse_foreign_part_way(self.records.journal, self.run.host, actions, self.rb.file, self.run.tag or "", "")

    async def check_foreign(self, *, advance: bool) -> str | None:
        """One line naming an action-log entry since this run's mark that no journaled call of this
        run explains (None: none). `advance`: when clean, the mark moves to now."""
        actions, self.reads.fresh_actions = self.reads.fresh_actions, None  # read once
        if actions is None:
            actions = await self.reads.action_log()
        last_effect = self.records.last_effect_id()
        mark = self.ctx.action_mark
        if mark:
            later = since_mark(actions, mark.to_json())
            if later is None:
                return (f"compose-manager's action log on {self.run.host} no longer holds the {mark.count} entries this run "
                        "read before (replaced or rewritten): who acted on the host cannot be told. Nothing more is sent; inspect the host")
            own = [oc for e in self.records.effects() if e.mutating and e.effect_id > mark.effect_id
                   and (oc := own_call(e.kind, e.request)) is not None]
            foreign = unexplained(later, own)
            if foreign:
                st = await self.reads.offered("status")
                in_flight = f"{st.action} of {', '.join(st.services) or 'every service'}" if st is not None else None
                return self.voice.scrub(foreign_message(self.run.host, foreign, in_flight=in_flight))
        if advance:
            self.ctx.action_mark = ActionMark(**new_mark(actions, last_effect))
        return None


@dataclass(kw_only=True, eq=False)
class Serving:
    """Whether an engine serves (engine/rules/serving_evidence.py, from docker/ps, its log window,
    the peers, the soak relay's /health), and the watches and `host now` line built on it."""

    reads: HostReads
    envs: EnvReader
    neighbours: Neighbours
    rb: Runbook
    ctx: RunContext
    voice: Voice
    #: service -> the file of its newest up in the action log (read once, when needed)
    _files_by_action_log: dict[str, str] | None = field(default=None, init=False)

    async def log_window(self, service: str) -> LogWindow:
        """The engine's last SERVING_WINDOW log lines (rotation may keep fewer), or why unreadable."""
        try:
            file = await self._log_file(service)
            text = await self.reads.log_through(file, service, SERVING_WINDOW)
        except ClientError as exc:
            return LogWindow.unreadable(f"{type(exc).__name__}: {self.voice.scrub(str(exc))[:160]}")
        return LogWindow(text.splitlines(), asked=SERVING_WINDOW)

    async def _log_file(self, service: str) -> str:
        """`known_file`, else the file of the newest up in the action log that named it (before the
        before-state is read, the new file may not define the old engine at all)."""
        known = self.reads.known_file(service)
        if known:
            return known
        if self._files_by_action_log is None:
            self._files_by_action_log = {}
            try:
                for act in await self.reads.action_log():
                    if act.action == "compose_up" and act.file:
                        self._files_by_action_log.update({s: act.file for s in act.services})
            except ClientError:
                pass  # the new file
        return self._files_by_action_log.get(service, self.rb.file)

    async def serving(self, service: str, containers: list[Container] | None = None, *, live: bool = False) -> Verdict:
        """Serving, not serving or unknown; the peers and other engines' logs are read only when
        docker and this engine's log do not decide. `live`: only live evidence says serving (not
        its ready line nor this run's cold start: a gate whose milestones rotated out)."""
        containers = containers if containers is not None else await self.reads.ps()
        by_svc = by_service(containers)
        c = by_svc.get(service)
        g = self.rb.log_gates
        decided = from_docker(service, c)
        if decided is not None:
            return decided
        assert c is not None
        ran_here = self.ctx.ready.get(service) == c.id and not live
        marks = () if live else g.required
        log = await self.log_window(service)
        decided = from_log(service, log, ready_marks=marks, startup=g.startup, ran_here=ran_here)
        if decided is not None:
            return decided
        others: dict[str, Verdict] = {}
        for o in self.rb.engines():
            if o == service:
                continue
            oc = by_svc.get(o)
            o_log = await self.log_window(o) if oc is not None and from_docker(o, oc) is None else LogWindow(())
            others[o] = base_verdict(o, oc, o_log, ready_marks=g.required, startup=g.startup,
                                     ran_here=oc is not None and self.ctx.ready.get(o) == oc.id)
        relay = await self._relay_health(service, containers) or relay_word(self.ctx.extra.get(RELAY_SEEN), service, c)
        return judge(service, c, log, ready_marks=marks, startup=g.startup, ran_here=ran_here,
                     peers=None if relay else await self.neighbours.peers_view(), others=others,
                     cold_start_s=self.rb.timeouts.cold_start, relay=relay)

    def _relay_ports(self) -> dict[str, tuple[int, str]]:
        """replica -> (soak relay port, token variable), from the runbook's `relay:` gates."""
        out: dict[str, tuple[int, str]] = {}
        for ph in self.rb.phases:
            for st in ph.steps:
                if st.relay is not None and ph.replica:
                    out.setdefault(ph.replica, (st.relay.port, st.relay.token_variable))
        return out

    async def _relay_health(self, service: str, containers: list[Container]) -> str | None:
        """GET /health through the soak relay's port of this engine's replica, when published and
        this engine is its replica's only one running: what it saw, or None (no evidence: the relay
        may route to a gone container). Only with the env map in hand: never reads the dashboard."""
        replica = self.rb.replica_of(service)
        port = self._relay_ports().get(replica or "")
        env = self.envs.env
        if port is None or env is None:
            return None
        siblings = [c for c in containers if self.rb.replica_of(c.service or c.name) == replica]
        if [c.service or c.name for c in siblings] != [service] or not any(publishes(c, port[0]) for c in containers):
            return None
        try:
            await self.reads.relay_client(port[0], env.get(port[1], "")).health()
        except ClientError:
            return None
        return f"the soak relay :{port[0]} (its replica's port) answers /health"

    async def take_relay_word(self, stopping: list[str], containers: list[Container]) -> None:
        """Before a down stops the soak relay: its word on each engine, kept for later serving checks."""
        ports = self._relay_ports()
        if not any(publishes(c, port) for c in containers if (c.service or c.name) in stopping for port, _ in ports.values()):
            return
        for c in containers:
            svc = c.service or c.name
            if self.rb.replica_of(svc) and (said := await self._relay_health(svc, containers)):
                self.ctx.extra.setdefault(RELAY_SEEN, {})[svc] = {"id": c.id, "said": said}

    async def running_engine_verdicts(self, containers: list[Container] | None = None) -> dict[str, Verdict]:
        """The verdict of every engine docker/ps lists."""
        containers = containers if containers is not None else await self.reads.ps()
        engines = [(c.service or c.name) for c in containers if self.rb.replica_of(c.service or c.name)]
        return {svc: await self.serving(svc, containers) for svc in engines}

    async def host_now(self) -> str:
        """One line for a final message: what each replica runs now and whether it serves."""
        try:
            containers = await self.reads.ps()
            parts = []
            for replica, engines in self.rb.replicas.items():
                running = [c for c in containers if (c.service or c.name) in engines]
                if not running:
                    parts.append(f"{replica}: nothing running")
                    continue
                for c in running:
                    svc = c.service or c.name
                    v = await self.serving(svc, containers)
                    parts.append(f"{replica}: {svc} {v.phrase()}")
            if self.rb.capacity == "fleet":  # engines up is not traffic: say whether the peers route here
                listed = await self.neighbours.still_listed()
                parts.append("in the pool: " + "; ".join(listed) if listed else
                             "NOT in any pool on the model-proxy peers (look at model-proxy-registrar)")
            return "host now: " + "; ".join(parts)
        except ClientError as exc:
            return f"host now: unknown (docker/ps could not be read: {type(exc).__name__})"

    async def watch_engines(self) -> dict[str, tuple[str, float | None]]:
        """The engines a soak watches: service -> (id, up seconds)."""
        return {c.service or c.name: (c.id, up_seconds(c.status))
                for c in await self.reads.ps() if self.rb.replica_of(c.service or c.name)}

    def check_ready_unchanged(self, watched: dict[str, tuple[str, float | None]]) -> str | None:
        """An engine whose cold start passed in this run must still be that container (on resume)."""
        for svc, cid in self.ctx.ready.items():
            if svc in watched and watched[svc][0] != cid:
                return f"{svc} was replaced since its cold start passed (container {cid[:12]} -> {watched[svc][0][:12]})"
        return None

    async def engines_still_serving(self, watched: dict[str, tuple[str, float | None]]) -> str | None:
        by_svc = by_service(await self.reads.ps())
        for svc, (cid, up) in watched.items():
            c = by_svc.get(svc)
            if c is None:
                return f"{svc} is gone from docker/ps"
            if c.id != cid:
                return f"{svc} was replaced (container ID changed)"
            if c.restarting or c.state != "running":
                return f"{svc} is {c.state} ({c.status})"
            now_up = up_seconds(c.status)
            if up is not None and now_up is not None and now_up < up:
                return f"{svc} restarted (docker/ps: {c.status})"
            if now_up is not None:
                watched[svc] = (cid, now_up)
        return None


# -- calls ---------------------------------------------------------------------------------------

@dataclass(kw_only=True, eq=False)
class ComposeCalls:
    """The compose calls a handler sends: a dry run (docker/ps compared around it), a mutating call
    (intent journaled before, outcome after), and the ledgers a call updates."""

    compose: Any
    envs: EnvReader
    reads: HostReads
    records: RunJournal
    foreign: ForeignChecks
    clock: RunClock
    entry: HostEntry
    rb: Runbook
    run: RunRecord
    ctx: RunContext
    voice: Voice
    visit: Visit

    def request(self, step: Step, *, dry_run: bool) -> ComposeRequest:
        spec = step.compose
        assert spec is not None
        tag, file = resolve_file(spec.file, self.rb, self.run.tag, self.ctx.previous)
        # force_recreate only as the step says (never on an engine: docker/compose#11900); never on a down
        force = bool(spec.force_recreate) and step.down is None
        return ComposeRequest(tag=tag, file=file, services=resolve_services(spec, self.ctx.selected),
                              project=self.entry.project, force_recreate=force, dry_run=dry_run,
                              allow_force_recreate=force)

    def dry_run_record(self, req: ComposeRequest, env: EnvMap, after: list[Container] | None) -> DryRunRecord:
        snap = {c.name: [c.id, c.created_at, c.state] for c in (after or [])}
        return DryRunRecord(tag=req.tag, file=req.file, services=list(req.services), project=req.project,
                            env_fingerprint=env.fingerprint(), force_recreate=req.force_recreate, after=snap)

    def same_as_checked(self, req: ComposeRequest, env: EnvMap) -> bool:
        """`req` is the exact request the checked dry run checked, env included."""
        return self.ctx.checked_dry_run == self.dry_run_record(req, env, None)

    async def dry_run_or_halt(self, req: ComposeRequest) -> DryRunCall:
        """The handlers' dry run: one refused for compose-manager's lock past `timeouts.gone` never
        ran, so it fails no replica's gate: it halts (failing it would run the phase's rollback,
        which stops the healthy engine the phase started)."""
        try:
            return await self.dry_run(req)
        except Busy as exc:
            error = self.voice.scrub(f"{type(exc).__name__}: {exc}")
            return DryRunCall("refused", outcome=lock_held(self.rb.timeouts.gone, "dry run", req.services, error))

    async def dry_run(self, req: ComposeRequest) -> DryRunCall:
        env = await self.envs.ensure_env()
        before_list = await self.reads.ps()
        before = snapshot(before_list)
        attempt = 0
        while True:
            attempt += 1
            try:
                outcome = await self.unless_busy(lambda: self.compose.up(req, env), f"the dry run of {', '.join(req.services)}",
                                                 abortable=True)
                break
            except (TagTooRecent, TagNotFound) as exc:
                return DryRunCall("refused", outcome=fail(f"compose-manager refused the tag {req.tag}: {self.voice.scrub(exc.detail)}"))
            except (ServerError, TransportError) as exc:
                # A dry run plans only, and docker/ps is compared around it: safe to ask again,
                # unless it changed something (then the comparison halts the run).
                if attempt >= 3:
                    return DryRunCall("failed", outcome=fail(f"the dry run failed {attempt} times: {self.voice.scrub(str(exc))}"))
                now = await self.reads.ps()
                changed = compare_ps(before_list, now, self.rb.oneshot_services())
                # stricter than after a success: any container whose state moved too (before it is retried)
                if changed or any(name in before and before[name] != seen for name, seen in snapshot(now).items()):
                    named = describe_changes(changed) or "container states"
                    return DryRunCall("changed", outcome=halt(f"a dry run that failed also changed real containers: {named} "
                                                              "(docker/compose#14029); inspect the host"))
                self.visit.log.warning("dry_run_retried", error=type(exc).__name__)
                await self.clock.wait()
        after_list = await self.reads.ps()
        changes = compare_ps(before_list, after_list, self.rb.oneshot_services())
        if changes:
            # a dry run is never in the action log: an entry this run did not make is someone else's
            foreign = await self.foreign.check_foreign(advance=False)
            if foreign:
                return DryRunCall("changed", outcome=halt(f"{foreign} (changed: {describe_changes(changes)})"))
            return DryRunCall("changed", outcome=halt(
                f"the dry run of {', '.join(req.services)} changed real containers: {describe_changes(changes)} "
                "(docker/compose#14029: a dry run that recreates for real)"))
        return DryRunCall("done", stream=outcome, after=after_list)

    async def unless_busy(self, send: Callable[[], Awaitable[T]], what: str, *, abortable: bool) -> T:
        """`send()`, waiting out compose-manager's lock held by another client for up to
        `timeouts.gone` (a 409 did nothing, so sending again is safe; giving up could leave a
        replica stopped for a transient lock); then the `Busy` is raised. `abortable`: False once
        the intent is journaled."""
        deadline = self.clock.clock.monotonic() + self.rb.timeouts.gone
        said = ""
        while True:
            try:
                return await send()
            except Busy as exc:
                if self.clock.clock.monotonic() >= deadline:
                    raise
                holder = await self._lock_holder(exc)
                if holder != said:
                    self.voice.emit("note", text=f"compose-manager on {self.run.host} is busy ({holder}); {what} waits "
                                                 f"for its lock (at most {format_duration(self.rb.timeouts.gone)} in all)")
                    said = holder
                self.visit.log.warning("compose_busy_waited", holder=holder)
                await self.clock.wait(abortable=abortable)

    async def _lock_holder(self, exc: Busy) -> str:
        held = await self.reads.offered("status")
        if held is None:
            text = exc.in_flight or "an operation of another client"
        else:
            text = " ".join(x for x in (held.action, ", ".join(held.services), held.file or "",
                                        f"since {held.started_at}" if held.started_at else "") if x)
        return self.voice.scrub(text)

    async def mutate(self, kind: str, req: ComposeRequest, baseline: dict[str, Any]) -> dict[str, Any]:
        """Check for foreign changes, journal the intent, send once, journal the outcome."""
        env = await self.envs.ensure_env()
        foreign = await self.foreign.check_foreign(advance=True)
        if foreign:
            raise ForeignChange(foreign)
        if kind == "compose_up":  # a one-shot sent again may exist again, whatever the outcome
            self.ctx.oneshots_removed = [s for s in self.ctx.oneshots_removed if s not in req.services]
        intent = self.records.record_intent(kind, {"request": req.redacted(), "baseline": baseline})
        self.voice.emit("effect", action=kind, services=list(req.services), file=req.file, tag=req.tag)
        scrub = self.voice.scrub
        try:
            verb = "down" if kind.startswith("compose_down") else "up"
            call = getattr(self.compose, verb)
            res = await self.unless_busy(lambda: call(req, env), f"the {verb} of {', '.join(req.services)}", abortable=False)
            outcome: dict[str, Any] = {"status": res.status, "exit_code": res.exit_code,
                                       "lines": [scrub(x) for x in res.lines[-30:]], "error": scrub(res.error or "")}
        except ClientError as exc:  # a server error may have acted: its outcome is settled by observation
            status = "unknown" if isinstance(exc, ServerError) else "refused"
            outcome = {"status": status, "error": scrub(f"{type(exc).__name__}: {exc}")}
            if isinstance(exc, Busy):  # refused for compose-manager's lock, held past the bound: nothing was done
                outcome["lock_held"] = True
        self.records.record_outcome(intent.effect_id, outcome)
        self.visit.log.info("effect_outcome", kind=kind, status=outcome["status"])
        return outcome | {"baseline": baseline}

    def mark_deployed(self, req: ComposeRequest) -> None:
        self.ctx.deployed.update({s: {"tag": req.tag, "file": req.file} for s in req.services})
        self.ctx.oneshots_removed = [s for s in self.ctx.oneshots_removed if s not in req.services]

    async def record_ownership(self, req: ComposeRequest, baseline: dict[str, Any], *, up: bool) -> None:
        """The container ledger after a call (engine/rules/ownership.py): an up's new IDs of its
        services are `created`; IDs gone since the baseline are `stopped` (a down: of its services;
        an up: any, --remove-orphans included). Called again on resume from the intent's baseline."""
        before = ownership.baseline_ids(baseline)
        try:
            now = await self.reads.ps()
        except ClientError:
            return  # docker/ps unreadable: the ledger is never guessed
        state = self.visit.node.id if self.visit.node is not None else self.visit.key
        if up:
            ownership.record(self.ctx.created, ownership.created_ids(before, now, req.services), state)
            ownership.record(self.ctx.stopped, ownership.gone_ids(before, now), state)
        else:
            ownership.record(self.ctx.stopped, ownership.gone_ids(before, now, req.services), state)


@dataclass(kw_only=True, eq=False)
class StopGuard:
    """What keeps a stop from taking capacity away. An engine may stop only while it is known not
    to serve, or another replica's engine is known to serve (one host), or the peers no longer list
    the host (fleet): "unknown" never permits it; leaving a fleet's pool asks the tier live first."""

    serving: Serving
    reads: HostReads
    neighbours: Neighbours
    journal: Journal
    table: Table
    rb: Runbook
    run: RunRecord
    ctx: RunContext
    voice: Voice
    visit: Visit
    clock: RunClock

    async def stop_guard(self, services: list[str]) -> str | None:
        """Why stopping these services now could take down the last serving replica (None: safe)."""
        # right before a call that takes the host out of a fleet's pool: the tier, asked live now
        if leave_pool.leave_pool_services(self.rb) & set(services):
            found = await self.neighbours.tier_refusal(self.journal, run_id=self.run.run_id)
            if found is not None:
                (out, why), host = found, self.run.host
                return (f"refusing to take {host} out of the pool: {why}. Nothing was sent; {host} stays in the pool. "
                        f"Bring {out} back into the pool first (`orchestrate rollback {out}` if its run ended outside "
                        f"it), then resume")
        engines = [s for s in services if self.rb.replica_of(s)]
        if not engines:
            await self.serving.take_relay_word(services, await self.reads.ps())
            return None
        # another client's operation may be changing the replica that must keep serving: judge after it
        deadline = self.clock.clock.monotonic() + self.rb.timeouts.gone
        said = False
        while await self.reads.in_flight():
            if self.clock.clock.monotonic() >= deadline:
                return ("refusing to stop " + ", ".join(engines) + ": compose-manager reports another operation in "
                        f"flight (GET /status) for longer than {format_duration(self.rb.timeouts.gone)}; nothing was "
                        "stopped. Look at the host, then resume")
            if not said:
                self.voice.emit("note", text=f"compose-manager on {self.run.host} reports another operation in flight; "
                                             f"the stop of {', '.join(engines)} waits for it to end")
                said = True
            await self.clock.wait()
        containers = await self.reads.ps()
        stopping = {self.rb.replica_of(s) for s in engines}
        listed: list[str] | None = None  # asked of the peers once per guard, when it matters
        for e in engines:
            mine = await self.serving.serving(e, containers)
            if mine.not_serving:
                continue  # stopping an engine known not to serve takes no capacity away
            if self.rb.capacity == "fleet":
                if listed is None:
                    listed = await self.neighbours.still_listed()
                if not listed:
                    continue  # drained: the runbook's other hosts carry the domain
                return (f"refusing to stop {e}: it {'serves' if mine.serving else 'may serve (' + mine.why + ')'} and "
                        f"{self.run.host} is not drained ({'; '.join(listed)}); "
                        f"stopping it would cut traffic the model-proxy still sends here. Nothing was stopped")
            others = [o for o in self.rb.engines() if self.rb.replica_of(o) not in stopping]
            verdicts = {o: await self.serving.serving(o, containers) for o in others}
            refusal = stop_refusal(e, mine, verdicts, self.run.host)
            if refusal:
                return refusal
        return None

    def not_owned(self, node: Node, present: list[Container]) -> dict[str, str]:
        """Service -> why it is left running: a rollback of a rollout stops only containers this run
        created (an `orchestrate rollback` run is exempt: the operator asked for the stop)."""
        if node.section not in ownership.ROLLBACK_SECTIONS or self.table.kind != "rollout":
            return {}
        _, others = ownership.owned_split(present, self.ctx.created)
        out = {}
        for c in others:
            why = ownership.not_ours_note(c, node.id, self.ctx.stopped)
            out[c.service or c.name] = why
            if self.rb.replica_of(c.service or c.name) and why not in self.ctx.not_stopped:
                self.ctx.not_stopped.append(why)  # an engine left running is said in the final message
            self.visit.log.warning("rollback_left_unowned_container", service=c.service or c.name, container=c.id[:12])
            self.voice.emit("note", text=why)
        return out


@dataclass(kw_only=True, eq=False)
class Waits:
    """Waiting out a sent call: an up of unknown outcome settled by observation (never sent again),
    a down followed until its containers are gone, a drain checked against the tier again."""

    clock: RunClock
    reads: HostReads
    calls: ComposeCalls
    guard: StopGuard
    neighbours: Neighbours
    records: RunJournal
    entry: HostEntry
    rb: Runbook
    run: RunRecord
    voice: Voice
    visit: Visit

    async def _dry_run_finds_current(self, req: ComposeRequest) -> bool:
        """A dry run of `req` plans no create, recreate or removal (its `plan` event, else its lines)."""
        res = await self.calls.dry_run(req.as_dry_run())
        if res.verdict != "done" or res.stream is None or res.stream.status != "success":
            return False
        self.records.journal_dry_run(req.as_dry_run(), res.stream, purpose="settle")
        event = res.stream.plan_event or {}
        plan = event.get("plan") if isinstance(event.get("plan"), dict) else None
        if plan is not None:
            busy = [s for key in ("create", "recreate", "remove") for s in (plan.get(key) or [])]
            return not busy
        parsed = parse_dry_run(res.stream.lines, project=self.entry.project)
        return all(parsed.actions.get(s, "unchanged") in ("unchanged", "started") for s in req.services) \
            and "removed" not in parsed.actions.values()

    async def settle_up(self, req: ComposeRequest, baseline: dict[str, Any]) -> str:
        """applied / not_applied / a sentence of what is known, from `GET /status`, the action log,
        the success record, docker/ps, a one-shot's output, a fresh dry run. Waits while an
        operation is in flight; without `GET /status` observes for up to SETTLE_S."""
        now_ = self.clock.clock.monotonic
        deadline = now_() + SETTLE_S
        hard_deadline = now_() + max(SETTLE_S, self.rb.timeouts.cold_start)
        base_ids = baseline.get("ids", {})
        while True:
            seen = now_()  # when this observation began: a stall after it is never read as time the condition had
            actions = await self.reads.action_log()
            new_actions = actions[baseline.get("actions", 0):]
            recorded = any(a.action == "compose_up" and a.tag == req.tag and a.file == req.file
                           and (not a.services or set(req.services) <= set(a.services)) for a in new_actions)
            by_svc = by_service(await self.reads.ps())
            changed = [s for s in req.services if s in by_svc and by_svc[s].id != base_ids.get(s)]
            if recorded and len(changed) == len(req.services):
                return "applied"
            in_flight = await self.reads.in_flight()
            if in_flight is False:
                # compose-manager says nothing runs any more: its success record and docker/ps decide
                if len(changed) == len(req.services):
                    return "applied"
                before, now = baseline.get("record"), await self.reads.success_record()
                if before is not None and now is not None and now != before and now[0] \
                        and (now[0].get("tag"), now[0].get("file")) == (req.tag, req.file):
                    # the record shifted to this request: the up succeeded (a one-shot such as
                    # model-downloader restarts in place, keeping its container ID)
                    return "applied"
                unseen = [s for s in req.services if s not in changed]
                if recorded and unseen and await self.reads.oneshots_ran(unseen):
                    # docker/ps lists running containers only: a one-shot (the perception check)
                    # that ran and exited is invisible there; its output says the up took effect
                    changed = changed + unseen
                    if len(changed) == len(req.services):
                        return "applied"
                if not changed:
                    return "not_applied"
                if await self._dry_run_finds_current(req):  # a one-shot restarted in place, keeping its ID
                    return "applied"
                return f"compose-manager finished; changed: {changed} of {list(req.services)}"
            if in_flight is True:
                # still running (an image pull can be long): wait, bounded by the cold start
                if seen >= hard_deadline:
                    return f"compose-manager still reports the up in flight after {int(self.rb.timeouts.cold_start)} s"
            elif seen >= deadline:
                if not recorded and not changed:
                    return "not_applied"
                return f"action recorded: {recorded}; changed: {changed or 'none'} of {list(req.services)}"
            await self.clock.wait(abortable=False)

    async def wait_gone(self, req: ComposeRequest, first: dict[str, Any], *, resends: int = 0) -> StepOutcome:
        """Wait until docker/ps no longer lists the services; on a zombie or a down with no effect,
        send it again (after the stop guard), at most MAX_DOWN_RESENDS times. `resends`: already
        sent again this visit (counted from the journal on resume)."""
        now_ = self.clock.clock.monotonic
        poll = self.clock.poll
        timeout = self.rb.timeouts.gone
        deadline = now_() + timeout
        # Time a down may legitimately take before a still-running container means it had no effect.
        no_effect_after = now_() + self.rb.timeouts.stop_grace + 4 * poll
        base_ids = first.get("baseline", {}).get("ids", {})
        zombie_polls = 0
        self.voice.emit("waiting", gate=f"docker/ps no longer lists {', '.join(req.services)}")
        while True:
            seen = now_()  # when this observation began: a stall after it is never read as time the condition had
            by_svc = by_service(await self.reads.ps())
            left = [by_svc[s] for s in req.services if s in by_svc]
            if not left and first.get("status") == "failure" and resends < MAX_DOWN_RESENDS:
                # docker/ps lists running containers only: a removal that failed half-way (a
                # zombie) is invisible there. The down said failure: send it again to finish it.
                resends += 1
                self.visit.log.warning("down_resent_after_failure")
                self.voice.emit("note", text="the down reported failure though docker/ps no longer lists the container: sending it again")
                first = await self.calls.mutate(f"compose_down_resend_{resends}", req, {"ids": base_ids})
                if first.get("lock_held"):  # a halt, as for the first down, never a failed gate
                    return lock_held(self.rb.timeouts.gone, "down", req.services, first.get("error", ""), again=True)
                continue
            if not left:
                return ok(f"{', '.join(req.services)} gone from docker/ps")
            zombies = [c for c in left if c.state in ("removing", "dead")]
            still = [c for c in left if c.state == "running" and c.id == base_ids.get(c.service or c.name)]
            zombie_polls = zombie_polls + 1 if zombies and len(zombies) == len(left) else 0
            resend_reason = None
            if zombie_polls >= 3:
                resend_reason = "zombie: " + ", ".join(f"{c.name} {c.state}" for c in zombies)
            elif still and seen >= no_effect_after and first.get("status") != "success":
                resend_reason = "the down had no observable effect"
            if resend_reason:
                refusal = await self.guard.stop_guard([c.service or c.name for c in left])
                if refusal:  # the world changed since the first down: never resend blindly
                    return halt(refusal)
                if resends >= MAX_DOWN_RESENDS:
                    return fail(f"{', '.join(c.name for c in left)} still listed after {resends + 1} downs ({resend_reason})")
                resends += 1
                zombie_polls = 0
                self.visit.log.warning("down_resent_after_observation", reason=resend_reason)
                self.voice.emit("note", text=f"sending the down again after observation ({resend_reason})")
                first = await self.calls.mutate(f"compose_down_resend_{resends}", req, {"ids": base_ids})
                if first.get("lock_held"):  # a halt, as for the first down, never a failed gate
                    return lock_held(self.rb.timeouts.gone, "down", req.services, first.get("error", ""), again=True)
                no_effect_after = now_() + self.rb.timeouts.stop_grace + 4 * poll
                deadline = now_() + timeout
                continue
            if seen >= deadline:
                return fail(f"{', '.join(c.name for c in left)} still listed after {int(timeout)} s")
            await self.clock.wait(abortable=False)

    async def recheck_after_drain(self, step: Step) -> str | None:
        """After a drain is confirmed (`step`, the presence gate after the leave-pool down): the tier
        read again. None: it carries the domain. Else this host rejoins at once (the registrar up,
        sent once per visit) and the line to halt with: someone took another host out meanwhile."""
        down = leave_pool.drain_down_before(self.rb, step)
        if down is None:
            return None
        host = self.run.host
        found = await self.neighbours.tier_refusal(None)
        if found is None:
            return None
        out, why = found
        req = self.calls.request(down, dry_run=False)
        recorded = self.records.recorded_effect("compose_up")
        if recorded is not None:  # a resume: the rejoin this visit already sent is settled, never repeated
            outcome = await self.records.resume_effect(recorded)
        else:
            outcome = await self.calls.mutate("compose_up", req, {"ids": {}, "actions": await self.reads.action_count()})
        how = ("rejoined at once" if outcome.get("status") == "success" else
               f"its rejoin (an up of {', '.join(req.services)}) did not succeed ({outcome.get('status')}): look at it now")
        return (f"{out} left the pool while {host} was draining ({why}): another orchestrator (a second journal) or "
                f"a human took {out} out; {host} {how}. Nothing else was changed")


@dataclass(kw_only=True, eq=False)
class Preflight:
    """What a run establishes before it acts: the rollback targets (each dry-run), what the host
    runs (placement), and the tag (merged to main and old enough, unless the check is skipped)."""

    compose: Any
    github: Any
    envs: EnvReader
    reads: HostReads
    calls: ComposeCalls
    records: RunJournal
    entry: HostEntry
    rb: Runbook
    run: RunRecord
    ctx: RunContext
    voice: Voice

    async def establish_previous(self) -> list[str]:
        """Fill `ctx.previous` for every service a rollback needs; returns those it could not.
        The target is the newest `compose_up` in the action log that named the service and
        succeeded (per compose-manager's record or this journal): an entry alone is an attempt."""
        actions = await self.reads.action_log()
        if self.ctx.action_mark is None:  # this run's first position in the log (foreign-change detection)
            self.ctx.action_mark = ActionMark(**new_mark(actions, self.records.last_effect_id()))
        succeeded = await self.reads.successful_deploys(self.records.journal, self.run.host)
        missing = []
        for service in self.rb.previous_refs():
            if service in self.ctx.previous:
                continue
            found = newest_successful(actions, service, succeeded)
            if found is None:
                missing.append(service)
                continue
            self.ctx.previous[service] = {"tag": found.tag or "", "file": found.file or "", "commit": found.commit or ""}
        if not self.ctx.previous_source:
            self.ctx.previous_source = "the action log, checked against compose-manager's success record and the journal"
        return missing

    async def validate_previous_targets(self) -> StepOutcome | None:
        """A dry run of every distinct rollback target, so a rollback never finds out after a stop
        that its target does not exist. None when all are accepted."""
        running = {(c.service or c.name): c for c in await self.reads.ps() if c.state in ("running", "restarting")}
        actions = await self.reads.action_log()
        for (tag, file), all_services in group_targets(self.rb, self.ctx.previous).items():
            # name only what it cannot recreate (docker/compose#14029): the rest is checked by the
            # rollback's own dry run, after its stop
            services, held = split_by_definition(all_services, running, tag, file, actions, engines=set(self.rb.engines()))
            if held:
                self.voice.emit("note", text=f"rollback target {file}@{tag}: {', '.join(held)} not dry-run now (a running engine, or "
                                             f"another definition a dry run could recreate); the rollback's own dry run checks it after its stop")
            if not services:
                continue
            req = ComposeRequest(tag=tag, file=file, services=tuple(services), project=self.entry.project, dry_run=True)
            res = await self.calls.dry_run(req)
            if res.verdict != "done":
                assert res.outcome is not None
                return res.outcome if res.verdict == "changed" else fail(f"rollback target {file}@{tag}: {res.outcome.note}")
            assert res.stream is not None
            self.records.journal_dry_run(req, res.stream)
            if res.stream.status != "success":
                return fail(f"rollback target {file}@{tag} ({', '.join(services)}): its dry run failed: "
                            + self.voice.scrub(" | ".join(res.stream.lines[-2:])))
        return None

    async def observe_host(self) -> dict[str, str] | StepOutcome:
        """What each service of the runbook's host states runs (placement.py), or the outcome."""
        env = await self.envs.ensure_env()
        try:
            return await observe_host(self.compose, env, self.rb, self.run.tag or "", self.entry.project,
                                      on_dry_run=self.records.journal_dry_run)
        except PlacementError as exc:
            return halt(str(exc)) if exc.changed else fail(str(exc))

    async def check_tag_age(self) -> tuple[bool, str] | None:
        """(ok, sentence), or None when the operator skipped the check."""
        from datetime import datetime  # the real clock: the explorer's hook steps module-level names only

        from orchestrator.hosts.clients.github import GitHubUnreachable

        tag = self.run.tag or ""
        skip = self.ctx.skip_tag_age_check
        repo = self.entry.github_repo
        scrub = self.voice.scrub
        if repo is None or self.github is None:
            if skip:
                return None
            return False, (f"the inventory names no github_repo for {self.run.host}, so tag {tag}'s merge and age cannot be checked: "
                           f"set github_repo, or pass --skip-tag-age-check")
        try:
            res = await self.github.check_tag(repo, tag, min_age_hours=self.rb.min_tag_age / 3600, now=datetime.now(UTC))
        except GitHubUnreachable as exc:
            if skip:
                self.voice.emit("note", text=f"GitHub could not be reached ({scrub(str(exc))}); going on: --skip-tag-age-check")
                return None
            return False, (f"GitHub could not be reached to check tag {tag} ({scrub(str(exc))}): its merge and age are "
                           f"unverified. Re-run with --skip-tag-age-check to go on without that check")
        if res.ok:
            return True, f"tag {tag} is merged to main in {repo} and old enough (commit {(res.commit or '')[:12]}, {res.committed_at})"
        return False, f"tag {tag} in {repo}: {res.reason}"


@dataclass(kw_only=True, eq=False)
class External:
    """Reads of what the engines do not say themselves (the host's proxy pool, GitHub, any JSON): GETs."""

    external: Any
    entry: HostEntry

    def github_repo(self) -> str | None:
        """The inventory's GitHub repository for this host, when GitHub can be read."""
        return self.entry.github_repo if self.external is not None else None

    def _client(self) -> Any:
        if self.external is None:
            raise LookupError("no client for external reads is configured")
        return self.external

    async def proxy_backends(self, port: int, token: str) -> list[Any]:
        return await self._client().proxy_backends(self.entry.relay_url(port), token)

    async def http_json(self, url: str, token: str | None) -> Any:
        return await self._client().json(url, token)

    async def pull_request(self, repo: str, tag: str) -> Any:
        return await self._client().pull_request(repo, tag)

    async def file_sha256(self, repo: str, file: str, tag: str) -> str | None:
        return await self._client().file_sha256(repo, file, tag)


# -- the one object handlers receive ---------------------------------------------------------------

class Runtime:
    """The run's parts, built once per runner; each `Activities` operation is the bound method of
    the part that does it (`rt.ps` is `HostReads.ps`)."""

    def __init__(self, *, run: RunRecord, runbook: Runbook, table: Table, journal: Journal, lease: Lease,
                 clients: HostClients, entry: HostEntry, clock: Clock, poll_interval: float, redactor: Redactor,
                 progress: Progress, ctx: RunContext, yes: bool, soak_override: float | None) -> None:
        # what the run is: read by handlers, never replaced
        self.run = run
        self.rb = runbook
        self.table = table
        self.journal = journal
        self.entry = entry
        self.ctx = ctx
        self.yes = yes
        self.soak_override = soak_override
        self.poll = poll_interval
        self.clock = clock

        self.visit = visit = Visit(log.bind(run_id=run.run_id, host=run.host))
        voice = Voice(progress=progress, redactor=redactor, clock=clock)
        timer = RunClock(clock=clock, poll=poll_interval, table=table, journal=journal, run_id=run.run_id,
                         visit=visit, voice=voice)
        records = RunJournal(journal=journal, lease=lease, run=run, ctx=ctx, redactor=redactor, visit=visit)
        names = (run.host, entry.instance_name, run.tag or "", *runbook.identifiers())
        envs = EnvReader(dashboard=clients.dashboard, instance_names=clients.instance_names,
                         entry=entry, redactor=redactor, ctx=ctx, voice=voice, visit=visit,
                         identifiers=tuple(n for n in names if n))
        reads = HostReads(compose=clients.compose, inference=clients.inference, relay=clients.relay,
                          prometheus=clients.prometheus, entry=entry, rb=runbook, ctx=ctx, voice=voice)
        neighbours = Neighbours(peers=clients.peers, addresses=clients.addresses, entry=entry, rb=runbook, run=run)
        foreign = ForeignChecks(compose=clients.compose, reads=reads, records=records, rb=runbook, run=run,
                                ctx=ctx, voice=voice)
        serving = Serving(reads=reads, envs=envs, neighbours=neighbours, rb=runbook, ctx=ctx, voice=voice)
        calls = ComposeCalls(compose=clients.compose, envs=envs, reads=reads, records=records, foreign=foreign,
                             clock=timer, entry=entry, rb=runbook, run=run, ctx=ctx, voice=voice, visit=visit)
        guard = StopGuard(serving=serving, reads=reads, neighbours=neighbours, journal=journal, table=table,
                          rb=runbook, run=run, ctx=ctx, voice=voice, visit=visit, clock=timer)
        waits = Waits(clock=timer, reads=reads, calls=calls, guard=guard, neighbours=neighbours,
                      records=records, entry=entry, rb=runbook, run=run, voice=voice, visit=visit)
        preflight = Preflight(compose=clients.compose, github=clients.github, envs=envs, reads=reads, calls=calls,
                              records=records, entry=entry, rb=runbook, run=run, ctx=ctx, voice=voice)
        external = External(external=clients.external, entry=entry)

        # the operations (orchestrator/engine/steps/activities.py), each from the part that does it
        self.scrub, self.scrub_lines, self.emit = voice.scrub, voice.scrub_lines, voice.emit
        self.may_begin_secret = voice.may_begin_secret
        self.check_abort, self.wait, self.wait_for_output = timer.check_abort, timer.wait, timer.wait_for_output
        self.start_heartbeat, self.tick = timer.start_heartbeat, timer.tick
        self.save_context, self.approvals, self.approve = records.save_context, records.approvals, records.approve
        self.context_json = records.context_json
        self.journal_dry_run, self.visit_effects = records.journal_dry_run, records.visit_effects
        self.recorded_effect, self.resume_effect = records.recorded_effect, records.resume_effect
        self.read_env, self.ensure_env, self.other_env = envs.read_env, envs.ensure_env, envs.other_env
        self.ps, self.action_count, self.success_record = reads.ps, reads.action_count, reads.success_record
        self.version_summary, self.host_cache, self.gpu_holders = reads.version_summary, reads.host_cache, reads.gpu_holders
        self.completion_once, self.cache_hit_check = reads.completion_once, reads.cache_hit_check
        self.relay_client, self.prometheus_client = reads.relay_client, reads.prometheus_client
        self.raw_log, self.raw_follower = reads.raw_log, reads.raw_follower
        self.attestation_report, self.action_log = reads.attestation_report, reads.action_log
        self.address_of = neighbours.address_of
        self.peer_presence, self.presence_problems = neighbours.peer_presence, neighbours.presence_problems
        self.foreign_in_flight, self.foreign_part_way = foreign.foreign_in_flight, foreign.foreign_part_way
        self.serving, self.running_engine_verdicts = serving.serving, serving.running_engine_verdicts
        self.host_now, self.watch_engines = serving.host_now, serving.watch_engines
        self.check_ready_unchanged, self.engines_still_serving = serving.check_ready_unchanged, serving.engines_still_serving
        self.request, self.dry_run, self.dry_run_record = calls.request, calls.dry_run_or_halt, calls.dry_run_record
        self.same_as_checked, self.mutate, self.mark_deployed = calls.same_as_checked, calls.mutate, calls.mark_deployed
        self.record_ownership = calls.record_ownership
        self.stop_guard, self.not_owned = guard.stop_guard, guard.not_owned
        self.settle_up, self.wait_gone, self.recheck_after_drain = waits.settle_up, waits.wait_gone, waits.recheck_after_drain
        self.establish_previous, self.validate_previous_targets = preflight.establish_previous, preflight.validate_previous_targets
        self.observe_host, self.check_tag_age = preflight.observe_host, preflight.check_tag_age
        self.github_repo, self.proxy_backends, self.http_json = external.github_repo, external.proxy_backends, external.http_json
        self.pull_request, self.file_sha256 = external.pull_request, external.file_sha256
        self._records, self._envs, self._timer = records, envs, timer  # what the properties below read

    # the run loop moves `visit` and the lease; the parts read them through `visit` and `records`
    @property
    def log(self) -> Any:
        return self.visit.log

    @property
    def lease(self) -> Lease:
        return self._records.lease

    @lease.setter
    def lease(self, value: Lease) -> None:
        self._records.lease = value

    @property
    def env(self) -> EnvMap | None:
        return self._envs.env

    @property
    def log_probe_interval(self) -> float:
        return self._timer.log_probe_interval

    @log_probe_interval.setter
    def log_probe_interval(self, value: float) -> None:
        self._timer.log_probe_interval = value
