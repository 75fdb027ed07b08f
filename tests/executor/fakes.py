"""Small scripted fakes for driving the executor: no network, no sockets, no real sleeps.

- `FakeClock`: `sleep` advances virtual time at once (and stops a runaway test at `limit`);
- `FakeCompose`: a tiny host (containers by service, their logs, the action log) that answers
  compose-manager's calls: a dry run plans from what runs, an up (re)creates, a down removes.
  `on_ps` scripts changes over time, `on_send` intercepts a call (return a `StreamOutcome` to
  answer instead of acting); `status`, `host_gpu` and `host_cache` answer 404 (not offered) unless
  a test sets them;
- `FakeDashboard`, `FakePeer`, `FakeInference`, `FakeRelay`, `FakeClients`: the other clients;
- `Rig`: one run in a real (in-memory) SQLite journal with a compiled table, and its `Executor`.
  `rig.step(n)` runs n transitions of the real loop; `rig.resume()` builds a new Executor from
  the journal (what `orchestrate resume` does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from recording import RecordingProgress

from orchestrator.engine.executor import Executor, RunContext
from orchestrator.engine.steps import StepOutcome
from orchestrator.hosts.clients.compose_manager import ComposeRequest, StreamOutcome
from orchestrator.hosts.clients.errors import BadRequest
from orchestrator.hosts.clients.inference import CheckResult, Completion
from orchestrator.hosts.clients.model_proxy import Presence
from orchestrator.hosts.envmap import EnvMap
from orchestrator.hosts.inventory import HostEntry
from orchestrator.hosts.parsers.action_log import Action
from orchestrator.hosts.parsers.docker_ps import Container
from orchestrator.hosts.redaction import Redactor
from orchestrator.journal.base import RunRecord
from orchestrator.journal.sqlite import SqliteJournal
from orchestrator.language.machine import compile_rollback, compile_rollout
from orchestrator.language.runbook import load_runbook


def _core_rules_only(rb):
    """The gpu02 runbook without its verification gates (metrics evidence, telemetry labels, the
    perception check): those have their own tests (tests/core/test_gates_units.py,
    tests/e2e/test_gates_e2e.py). These unit tests pin the executor's compose and safety rules."""
    def keep(st):
        c = st.compose
        return st.kind not in ("metrics", "labels", "oneshot") and not (
            c is not None and isinstance(c.services, list) and "glm53-perception-check" in c.services)

    def phase(ph):
        upd = {"steps": [st for st in ph.steps if keep(st)]}
        if ph.rollback is not None:
            upd_rb = ph.rollback.model_copy(update={"steps": [st for st in ph.rollback.steps if keep(st)]})
            upd["rollback"] = upd_rb
        return ph.model_copy(update=upd)

    return rb.model_copy(update={"phases": [phase(p) for p in rb.phases], "full_rollback": [phase(p) for p in rb.full_rollback]})


RB = _core_rules_only(load_runbook("gpu02-glm53-w4afp8-long-context"))
R1 = "model-sg-glm53-w4afp8-tp4-r1"
OLD_R2 = "model-sg-glm53-fp8-tp4-r2"
NEW_R2 = "model-sg-glm53-w4afp8-tp4-r2"
RELAY = "glm53-soak-relay"
SIDECARS = ("proxy-glm53", "otelcol-contrib", "dcgm-glm53")
SHARED = ("nginx", "model-proxy-registrar")
OLD_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml"
OLD_TAG, TAG = "v1", "v2"
PREVIOUS = {s: {"tag": OLD_TAG, "file": OLD_FILE, "commit": ""} for s in RB.previous_refs()}
READY = RB.log_gates.required[0]
STARTUP = RB.log_gates.startup + "tp_size=4, api_key='{api_key}')"
RANK_BUDGET = 108984795136

SECRETS = {"HF_TOKEN": "hf_S3cretValue0123456789", "PROXY_TOKEN": "pt-proxy-S3cret-42", "DB_PASSWORD": "pw-Zq9-unique"}
ENV = EnvMap({**SECRETS, "ENV": "prod", "CVM_NAME": "gpu02", "LONG_LABEL": "a-sixteen-plus-label-value"})

ENTRY = HostEntry(
    compose_manager_url="http://cm.invalid", instance_name="gpu02", model_proxy_address="10.0.0.2:8000",
    inference_endpoint="http://inference.invalid", soak_relay_base_url="http://relay.invalid",
    available_ram_gib=1500, available_ram_source="test", gpus=8, github_repo="nearai/cvm-compose-files",
)


def engine_log(*, ready: bool = True, api_key: str = "") -> list[str]:
    """What an engine logs through a cold start: startup, every rank's milestones, the ready line."""
    lines = [STARTUP.format(api_key=api_key)]
    lines += [f"[TP{i}] rank_budget_bytes={RANK_BUDGET}" for i in range(4)]
    lines += [f"[TP{i}] HiCache startup RAM allocated" for i in range(4)]
    return lines + ([READY] if ready else [])


class ClockLimit(Exception):
    """A test ran past its virtual-time limit (a wait that never ends)."""


class FakeClock:
    def __init__(self, limit: float = 3 * 86400) -> None:
        self.now = 0.0
        self.limit = limit

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)
        if self.now > self.limit:
            raise ClockLimit(f"virtual time passed {self.limit} s")
        await asyncio.sleep(0)


@dataclass
class Ctr:
    id: str
    file: str
    tag: str
    started: float
    state: str = "running"
    log: list[str] = field(default_factory=list)
    #: lines logged later: (virtual time, line)
    script: list[tuple[float, str]] = field(default_factory=list)
    #: docker's Status text, when a test wants one the state does not imply
    status: str | None = None

    def lines(self, now: float) -> list[str]:
        return self.log + [ln for t, ln in self.script if t <= now]


class FakeCompose:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.host: dict[str, Ctr] = {}
        self.actions: list[Action] = []
        self.calls: list[tuple[str, ComposeRequest, EnvMap]] = []  # ("dry_run" | "up" | "down", req, env)
        self.log_tails: list[int] = []
        self.on_ps: Callable[[FakeCompose], None] | None = None
        self.on_send: Callable[[str, ComposeRequest, EnvMap], StreamOutcome | None] | None = None
        self.extra_lines: list[str] = []  # appended to every stream (e.g. a server echoing a secret)
        self.boot: Callable[[str], list[str]] = lambda svc: engine_log() if RB.replica_of(svc) else ["started"]
        self._n = 0

    # -- scripting the host
    def run(self, service: str, *, file: str = OLD_FILE, tag: str = OLD_TAG, log: list[str] | None = None,
            state: str = "running", started: float = -7200.0) -> Ctr:
        self._n += 1
        default = engine_log() if RB.replica_of(service) else ["started"]
        self.host[service] = Ctr(f"{service[-6:]}-{self._n:04d}", file, tag, started, state,
                                 list(default if log is None else log))
        return self.host[service]

    def apply(self, req: ComposeRequest) -> None:
        for svc in req.services:
            c = self.host.get(svc)
            if c is None or (c.file, c.tag) != (req.file, req.tag):
                self.run(svc, file=req.file, tag=req.tag, log=self.boot(svc), started=self.clock.now)
        self.actions.append(Action(None, "compose_up", req.tag, None, req.file, None, tuple(req.services)))

    def sent(self, verb: str) -> list[ComposeRequest]:
        return [r for v, r, _ in self.calls if v == verb]

    # -- reads
    async def ps(self, project: str | None = None, services: Any = None) -> list[Container]:
        if self.on_ps is not None:
            self.on_ps(self)
        out = []
        for svc, c in self.host.items():
            status = c.status or {"running": f"Up {int(self.clock.now - c.started)} seconds",
                                  "restarting": "Restarting (1) 2 seconds ago"}.get(c.state, "Exited (1) 2 seconds ago")
            out.append(Container(id=c.id, name=svc, image="img", state=c.state, status=status,
                                 created_at=f"created-{c.id}", service=svc,
                                 labels={"com.docker.compose.project.config_files": f"/app/work/{c.file}"}))
        return out

    async def logs(self, file: str, services: list[str], tail: int, project: str | None = None) -> str:
        self.log_tails.append(tail)
        lines = [f"{s}  | {ln}" for s in services if s in self.host for ln in self.host[s].lines(self.clock.now)[-tail:]]
        return "\n".join(lines) + ("\n" if lines else "")

    async def action_log(self) -> list[Action]:
        return list(self.actions)

    async def version(self) -> Any:
        # compose-manager's success record: the previous configuration's up succeeded
        from orchestrator.hosts.parsers.compose_manager_reads import VersionInfo

        return VersionInfo({"status": "ok", "tag": OLD_TAG, "commit": "abc", "file": OLD_FILE,
                              "projects": {"work": {"current": {"tag": OLD_TAG, "commit": "abc", "file": OLD_FILE}}}})

    async def status(self) -> Any:
        raise BadRequest("compose-manager", "not offered by this server", status=404)

    host_gpu = host_cache = status

    # -- mutating calls
    async def up(self, req: ComposeRequest, env: EnvMap) -> StreamOutcome:
        req.validate(env, action="up")
        verb = "dry_run" if req.dry_run else "up"
        self.calls.append((verb, req, env))
        if self.on_send is not None and (res := self.on_send(verb, req, env)) is not None:
            return res
        if req.dry_run:
            lines = []
            for svc in req.services:
                c = self.host.get(svc)
                st = "Created" if c is None else ("Running" if (c.file, c.tag) == (req.file, req.tag) else "Recreate")
                lines.append(f" ✔ DRY-RUN MODE -  Container {svc}  {st}  0.0s")
            return StreamOutcome("success", 0, lines + self.extra_lines)
        self.apply(req)
        return StreamOutcome("success", 0, [f" ✔ Container {s}  Started" for s in req.services] + self.extra_lines)

    async def down(self, req: ComposeRequest, env: EnvMap) -> StreamOutcome:
        req.validate(env, action="down")
        self.calls.append(("down", req, env))
        if self.on_send is not None and (res := self.on_send("down", req, env)) is not None:
            return res
        for svc in req.services:
            self.host.pop(svc, None)
        self.actions.append(Action(None, "compose_down", req.tag, None, req.file, None, tuple(req.services)))
        return StreamOutcome("success", 0, [f" ✔ Container {s}  Removed" for s in req.services])


class FakeDashboard:
    def __init__(self, *maps: EnvMap) -> None:
        self.maps = list(maps) or [ENV]
        self.reads = 0
        self.before_read: Callable[[], Awaitable[None]] | None = None  # e.g. wait for a heartbeat

    async def env_map(self, name: str) -> EnvMap:
        if self.before_read is not None:
            await self.before_read()
        self.reads += 1
        return self.maps[min(self.reads, len(self.maps)) - 1]


class FakePeer:
    """A model-proxy peer. Default: lists every address healthy under the long domain only;
    `lists(address, domain) -> (listed, healthy)` scripts it; `error` makes every call raise."""

    def __init__(self, name: str, lists: Callable[[str, str], tuple[bool, bool]] | None = None) -> None:
        self.name = name
        self.lists = lists
        self.error: Exception | None = None

    async def presence(self, address: str, domain: str) -> Presence:
        if self.error is not None:
            raise self.error
        if self.lists is not None:
            listed, healthy = self.lists(address, domain)
        else:
            listed = healthy = domain == RB.domains.long
        return Presence(listed=listed, healthy=healthy)


class FakeInference:
    async def completion(self, model: str, messages: list[dict[str, Any]], max_tokens: int = 64) -> Completion:
        return Completion("ready", 12, None)

    async def cache_hit_check(self, model: str) -> CheckResult:
        return CheckResult(True, "cached_tokens > 0")


class FakeRelay:
    async def direct_checks(self, model: str) -> CheckResult:
        return CheckResult(True, "ok")


@dataclass
class FakeClients:
    compose: FakeCompose
    dashboard: FakeDashboard
    peers: list[FakePeer]
    inference: FakeInference = field(default_factory=FakeInference)
    relay_tokens: list[str] = field(default_factory=list)
    github: Any = None
    addresses: dict[str, str] = field(default_factory=dict)  # inventory host -> model-proxy address
    instance_names: dict[str, str] = field(default_factory=dict)  # inventory host -> dashboard instance name
    external: Any = None  # no external reads (their gates have their own tests)

    def relay(self, url: str, token: str) -> FakeRelay:
        self.relay_tokens.append(token)
        return FakeRelay()

    def prometheus(self, url: str) -> Any:
        raise AssertionError(f"no query API in these tests ({url})")  # the query gate has its own tests


def host_before(compose: FakeCompose) -> None:
    """gpu02 before the rollout: the FP8 r2 and r1 on the previous file, serving; the sidecars."""
    for svc in (OLD_R2, R1, *SIDECARS, *SHARED):
        compose.run(svc)
    compose.actions.append(Action(None, "compose_up", OLD_TAG, "abc", OLD_FILE, None, ()))


class _Stop(Exception):
    pass


class Rig:
    """One rollout run of gpu02 on the fake host, journaled in a real SQLite file."""

    def __init__(self, *, state: str | None = None, ctx: RunContext | None = None,
                 start_phase: str | None = None, env: tuple[EnvMap, ...] = (ENV,), yes: bool = True,
                 soak: float | None = None, poll: float = 30.0, journal: SqliteJournal | None = None,
                 rb: Any = None, host: str = "gpu02", kind: str = "rollout") -> None:
        self.rb = rb if rb is not None else RB  # another runbook (e.g. the base tier's) for its own rules
        self.clock = FakeClock()
        self.compose = FakeCompose(self.clock)
        self.dashboard = FakeDashboard(*env)
        self.clients = FakeClients(self.compose, self.dashboard, [FakePeer("peer-a"), FakePeer("peer-b")])
        # kind "rollback": an operator's `orchestrate rollback --replica all` run (its own table)
        self.table = compile_rollout(self.rb, start_phase) if kind == "rollout" else compile_rollback(self.rb, ["r1", "r2"])
        self.journal = journal or SqliteJournal(":memory:")
        self.redactor = Redactor()
        self.progress = RecordingProgress()
        self.yes, self.soak, self.poll = yes, soak, poll
        # no GitHub in these tests: the tag-age check has its own tests (tests/executor/test_preflight.py)
        ctx = ctx or RunContext(start_phase=start_phase, skip_tag_age_check=True)
        self.run = self.journal.create_run(host=host, runbook=self.rb.name, tag=TAG, kind=kind,
                                           state=state or self.table.start, context=ctx.to_json())
        self.lease, _ = self.journal.acquire_lease(host, self.run.run_id, "test-runner", 600)
        self.ex = self.resume()

    def resume(self) -> Executor:
        """A new Executor from the journal's record of the run (a resume)."""
        self.ex = Executor(run=self.journal.get_run(self.run.run_id), runbook=self.rb, table=self.table, journal=self.journal,
                           lease=self.lease, clients=self.clients, entry=ENTRY, clock=self.clock,  # type: ignore[arg-type]
                           poll_interval=self.poll, redactor=self.redactor, progress=self.progress, yes=self.yes,
                           soak_override=self.soak)
        return self.ex

    def use(self, **clients: Any) -> Executor:
        """Other clients for this run (`peers=`, `relay=`, `github=`, ...): the runtime's parts receive
        their clients when they are built, so the Executor is built again over them."""
        for name, client in clients.items():
            setattr(self.clients, name, client)
        return self.resume()

    @property
    def ctx(self) -> RunContext:
        return self.ex.ctx

    async def step(self, n: int = 1) -> list[tuple[str, str, str]]:
        """Run the real loop for `n` transitions: [(event, the handler's note (before scrubbing), state it went to)]."""
        ex, done = self.ex, []
        real = ex._transition

        def once(state: str, outcome: StepOutcome, *rest: Any) -> None:
            real(state, outcome, *rest)
            done.append((outcome.event.value, outcome.note, ex.machine.state))
            if len(done) >= n:
                raise _Stop

        ex._transition = once  # type: ignore[method-assign]
        try:
            await ex.run_to_end()
        except _Stop:
            pass
        finally:
            del ex._transition
        return done

    async def run_to_end(self) -> RunRecord:
        return await self.ex.run_to_end()

    def effects(self, *, mutating: bool | None = None) -> list[Any]:
        return [e for e in self.journal.effects(self.run.run_id) if mutating is None or e.mutating == mutating]

    def record(self) -> RunRecord:
        return self.journal.get_run(self.run.run_id)


def ctx_at(**kw: Any) -> RunContext:
    """A run context part-way through the rollout: the rollback targets are known."""
    return RunContext(previous={k: dict(v) for k, v in PREVIOUS.items()}, **kw)
