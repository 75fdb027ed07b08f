"""The executor: performs each state's effect through the clients and feeds the machine one event.

It is the only place where the state machine meets the network, the clock and the journal.
Rules it keeps (each has a test):
- every effect is journaled as an intent before and an outcome after; every transition too;
- a mutating call (`compose/up`, `compose/down`) is never retried blindly: an unknown outcome is
  settled by observing `docker/ps` and the action log; on resume an intent without an outcome is
  settled the same way, never sent again unobserved;
- every `up` is applied only right after a checked dry run of the same request; `docker/ps` is
  compared before and after every dry run (docker/compose#14029) and any change halts the run;
- every compose call carries the host's whole env map exactly as read; nothing it logs, journals or
  reports contains an env value or a token (the redactor scrubs, and only keys are ever rendered).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import structlog

from orchestrator.budget import GIB, check_fit, format_gib, parse_budget, per_rank_bytes
from orchestrator.clients.compose_manager import ComposeRequest, StreamOutcome
from orchestrator.clients.errors import (
    Busy,
    ClientError,
    RequestInvalid,
    ServerError,
    TagNotFound,
    TagTooRecent,
    TransportError,
)
from orchestrator.clock import Clock
from orchestrator.envmap import EnvMap
from orchestrator.host_clients import HostClients
from orchestrator.inventory import HostEntry
from orchestrator.journal.base import Fenced, Journal, Lease, LeaseLost, RunRecord
from orchestrator.log_gate import LogGate
from orchestrator.logfollow import LogFollower
from orchestrator.machine import HALTED, TERMINALS, Event, Machine, Node, Table
from orchestrator.parsers.action_log import last_deploy
from orchestrator.parsers.docker_ps import Container
from orchestrator.parsers.dry_run import parse_dry_run
from orchestrator.plan_check import judge_plan
from orchestrator.progress import NullProgress, Progress
from orchestrator.redaction import Redactor
from orchestrator.requests import UnresolvedReference, resolve_request
from orchestrator.runbook import Runbook, Step

log = structlog.get_logger("orchestrator.executor")

#: How long an unknown `up` outcome is observed before deciding it did not take effect. The
#: stream may break while compose-manager is still pulling images; it records the action in its
#: log only when the up finishes, so give it the time a pull of an engine image can take.
SETTLE_S = 600.0
#: How many times a down is sent again when observation shows a zombie or no effect.
MAX_DOWN_RESENDS = 2


class AbortRequested(Exception):
    pass


class RunnerFenced(Exception):
    """This runner lost its lease: another runner owns the run now. Stop without writing."""


@dataclass
class StepOutcome:
    event: Event
    note: str = ""


def _ok(note: str = "") -> StepOutcome:
    return StepOutcome(Event.OK, note)


def _fail(note: str) -> StepOutcome:
    return StepOutcome(Event.FAIL, note)


def _halt(note: str) -> StepOutcome:
    return StepOutcome(Event.HALT, note)


def _snapshot(containers: list[Container]) -> dict[str, tuple[str, str, str]]:
    return {c.name: (c.id, c.created_at, c.state) for c in containers}


def _by_service(containers: list[Container]) -> dict[str, Container]:
    out: dict[str, Container] = {}
    for c in containers:
        out[c.service or c.name] = c
    return out


class Executor:
    def __init__(
        self,
        *,
        run: RunRecord,
        runbook: Runbook,
        table: Table,
        journal: Journal,
        lease: Lease,
        clients: HostClients,
        entry: HostEntry,
        clock: Clock,
        poll_interval: float,
        redactor: Redactor,
        progress: Progress | None = None,
        yes: bool = False,
        soak_override: float | None = None,
    ) -> None:
        self.run = run
        self.rb = runbook
        self.table = table
        self.journal = journal
        self.lease = lease
        self.c = clients
        self.entry = entry
        self.clock = clock
        self.poll = poll_interval
        self.redactor = redactor
        self.progress = progress or NullProgress()
        self.yes = yes
        self.soak_override = soak_override
        self.ctx: dict[str, Any] = dict(run.context)
        self.ctx.setdefault("previous", {})
        self.ctx.setdefault("plans", {})
        self.ctx.setdefault("retries", {})
        self.env: EnvMap | None = None
        self.machine = Machine(table, run.state)
        self.visit_key = ""
        self.log = log.bind(run_id=run.run_id, host=run.host)

    # -- the loop ----------------------------------------------------------------------------------
    async def run_to_end(self) -> RunRecord:
        self._emit("run_started", run_id=self.run.run_id, host=self.run.host, state=self.machine.state)
        while not self.machine.terminal:
            state = self.machine.state
            node = self.table.nodes[state]
            self.visit_key = f"{state}@{len(self.journal.transitions(self.run.run_id))}"
            self.log = log.bind(run_id=self.run.run_id, host=self.run.host, step=state)
            self._emit("step_started", state=state, say=node.step.say if node.step else "", phase=node.phase)
            self.log.info("step_started")
            try:
                self._check_abort(node)
                outcome = await self._perform(node)
            except AbortRequested:
                outcome = StepOutcome(Event.ABORT, "an operator asked to abort")
            except (Fenced, LeaseLost) as exc:
                raise RunnerFenced(str(exc)) from None
            except RequestInvalid as exc:
                outcome = _halt(f"refused to send an invalid request: {self.redactor.scrub(str(exc))}")
            except UnresolvedReference as exc:
                outcome = _halt(str(exc))
            except ClientError as exc:
                outcome = _fail(f"{exc.system}: {self.redactor.scrub(str(exc))}")
            self._transition(state, outcome)
        return self.journal.get_run(self.run.run_id)

    def _transition(self, state: str, outcome: StepOutcome) -> None:
        to = self.machine.send(outcome.event)
        note = self.redactor.scrub(outcome.note)
        if outcome.event in (Event.FAIL, Event.HALT, Event.ABORT):
            self.ctx["failure"] = {"state": state, "event": outcome.event.value, "reason": note}
        terminal = to in TERMINALS
        message = None
        if terminal:
            message = self._final_message(state, to, note)
        self.journal.record_transition(
            self.lease, self.run.run_id, state, outcome.event.value, to,
            context=self.redactor.scrub_obj(self.ctx), terminal=terminal,
            outcome=to if terminal else None, message=message, note=note or None,
        )
        self.log.info("transition", on=outcome.event.value, to=to, note=note)
        self._emit("transition", state=state, event_name=outcome.event.value, to=to, note=note)
        if terminal:
            self._emit("run_finished", outcome=to, message=message)

    def _final_message(self, state: str, to: str, note: str) -> str:
        node = self.table.nodes[state]
        failure = self.ctx.get("failure")
        if to == HALTED and node.halt_message and node.section == "rollback":
            msg = node.halt_message.format(host=self.run.host, run_id=self.run.run_id)
            if failure:
                msg = f"{failure['state']} failed: {failure['reason']}. " + msg
            return " ".join(msg.split())
        if to == "DONE":
            return f"{self.run.host}: every phase passed its gates"
        if failure:
            return f"{to}: {failure['state']} -> {failure['event']}: {failure['reason']}" + (
                f"; then {state}: {note}" if state != failure["state"] and note else ""
            )
        return f"{to}: {note}"

    def _emit(self, kind: str, **fields: Any) -> None:
        """Progress for humans/machines; `clock` is this run's clock (simulated time in the demo)."""
        self.progress.event(kind, clock=self.clock.monotonic(), **fields)

    def _check_abort(self, node: Node) -> None:
        if self.table.allows(node.id, Event.ABORT) and self.journal.abort_requested(self.run.run_id):
            raise AbortRequested()

    async def _wait(self, seconds: float | None = None) -> None:
        await self.clock.sleep(self.poll if seconds is None else seconds)
        self._check_abort(self.machine.node)

    # -- dispatch ----------------------------------------------------------------------------------
    async def _perform(self, node: Node) -> StepOutcome:
        step = node.step
        if step is None:  # a marker state (an empty rollback that halts)
            return _ok("handing over to a human")
        kind = step.kind
        if kind == "check":
            return await {"env_map": self._check_env, "budget": self._check_budget, "before_state": self._check_before}[step.check](step)  # type: ignore[index]
        await self._ensure_env()
        if kind == "dry_run":
            return await self._dry_run(node, step)
        if kind == "up":
            return await self._up(node, step)
        if kind == "down":
            return await self._down(node, step)
        if kind == "logs":
            return await self._logs(node, step)
        if kind == "relay":
            return await self._relay(step)
        if kind == "verify":
            return await self._verify(step)
        if kind == "soak":
            return await self._soak(node, step)
        raise AssertionError(kind)

    # -- preflight checks --------------------------------------------------------------------------
    async def _ensure_env(self) -> None:
        if self.env is None:
            self.env = await self.c.dashboard.env_map(name=self.entry.instance_name)
            self.redactor.add(*self.env.redaction_values())
            fp = self.env.keys_fingerprint()
            known = self.ctx.get("env_keys_fingerprint")
            if known and known != fp:
                self.log.warning("env_map_keys_changed", keys=len(self.env))
                self._emit("note", text="the host's env map keys changed since the run started; the map as read now is passed whole")
            self.ctx["env_keys_fingerprint"] = fp
            self.ctx["env_keys"] = len(self.env)

    async def _check_env(self, step: Step) -> StepOutcome:
        self.env = None
        await self._ensure_env()
        assert self.env is not None
        return _ok(f"read the env map of {self.entry.instance_name}: {len(self.env)} keys (values are never shown)")

    async def _check_budget(self, step: Step) -> StepOutcome:
        assert self.env is not None
        b = self.rb.budget
        allowed = [parse_budget(a) for a in b.allowed]
        raw = self.env.get(b.variable)
        if raw is not None:
            try:
                value = parse_budget(raw)
            except ValueError:
                value = None
            if value is None or all(value != a for a in allowed):
                return _fail(
                    f"{b.variable} is set in the env map to a value other than {' or '.join(b.allowed)} "
                    f"(env-map values are not shown); unset it or set it to {b.allowed[0]} in the dashboard"
                )
        effective = parse_budget(b.default) if raw is None else parse_budget(raw)
        avail = int(self.entry.available_ram_gib * GIB)
        report = check_fit(
            [effective] * b.replicas, avail, parse_budget(b.reserve).bytes, parse_budget(b.min_page_cache).bytes
        )
        replica_bytes = effective.bytes
        rank = per_rank_bytes(replica_bytes, b.ranks_per_replica)
        self.ctx["budget"] = {"replica_bytes": replica_bytes, "rank_budget_bytes": rank}
        if not report.ok:
            return _fail(
                f"{b.replicas} x {format_gib(replica_bytes)} does not fit {self.run.host}'s {format_gib(avail)} available "
                f"({self.entry.available_ram_source}) minus the {b.reserve} reserve: " + "; ".join(report.problems)
            )
        return _ok(
            f"{b.replicas} x {format_gib(replica_bytes)} fits in {format_gib(avail)} minus {b.reserve}, "
            f"leaving {format_gib(report.page_cache_headroom_bytes)} for page cache; every rank must log rank_budget_bytes={rank}"
        )

    async def _check_before(self, step: Step) -> StepOutcome:
        before: dict[str, Any] = {}
        try:
            before["version"] = {k: v for k, v in (await self.c.compose.version()).items() if k in ("tag", "commit", "file")}
        except ClientError as exc:
            before["version"] = {"error": type(exc).__name__}
        containers = await self.c.compose.ps(self.entry.project)
        before["ps"] = {c.name: {"id": c.id, "state": c.state, "status": c.status} for c in containers}
        actions = await self.c.compose.action_log()
        missing = []
        for service in self.rb.previous_refs():
            if service in self.ctx["previous"]:
                continue
            act = last_deploy(actions, service)
            if act is None or not act.tag or not act.file:
                missing.append(service)
                continue
            self.ctx["previous"][service] = {"tag": act.tag, "file": act.file, "commit": act.commit or ""}
        if missing:
            return _fail(
                "cannot establish the previous deploy (tag and file) of " + ", ".join(missing)
                + " from the action log: without a rollback target the rollout does not start"
            )
        peers: dict[str, Any] = {}
        problems = []
        for peer in self.c.peers:
            for label, domain in (("long", self.rb.domains.long), ("base", self.rb.domains.base)):
                p = await peer.presence(self.entry.model_proxy_address, domain)
                peers[f"{peer.name}/{label}"] = {"listed": p.listed, "healthy": p.healthy}
            if not peers[f"{peer.name}/long"]["healthy"]:
                problems.append(f"{peer.name} does not list {self.entry.model_proxy_address} healthy under {self.rb.domains.long}")
            if peers[f"{peer.name}/base"]["listed"]:
                problems.append(f"{peer.name} lists {self.entry.model_proxy_address} under the base domain {self.rb.domains.base}")
        before["peers"] = peers
        comp = await self._completion_once()
        before["completion"] = comp
        self.ctx["before"] = before
        if problems:
            return _fail("before-state: " + "; ".join(problems) + " (the host must be healthy before a rollout starts)")
        if not comp.get("ok"):
            return _fail(f"before-state: a long-domain completion failed ({comp.get('reason')}); the host must serve before a rollout starts")
        prev = ", ".join(f"{s} <- {v['file']}@{v['tag']}" for s, v in self.ctx["previous"].items())
        return _ok(f"before-state recorded; previous deploys: {prev}")

    async def _completion_once(self) -> dict[str, Any]:
        try:
            done = await self.c.inference.completion(
                self.rb.model, [{"role": "user", "content": "Reply with the word ready."}], max_tokens=8
            )
            return {"ok": True, "prompt_tokens": done.prompt_tokens}
        except ClientError as exc:
            return {"ok": False, "reason": self.redactor.scrub(f"{type(exc).__name__}: {exc}")}

    # -- compose effects ---------------------------------------------------------------------------
    def _request(self, step: Step, *, dry_run: bool) -> ComposeRequest:
        spec = step.compose
        assert spec is not None
        return resolve_request(
            spec, self.rb, tag=self.run.tag, previous=self.ctx["previous"], selected=self.ctx.get("selected"),
            project=self.entry.project, dry_run=dry_run,
        )

    async def _ps(self) -> list[Container]:
        return await self.c.compose.ps(self.entry.project)

    async def _dry_run(self, node: Node, step: Step) -> StepOutcome:
        assert self.env is not None and step.plan is not None
        req = self._request(step, dry_run=True)
        self.ctx.pop("checked_dry_run", None)
        before = _snapshot(await self._ps())
        attempt = 0
        while True:
            attempt += 1
            try:
                outcome = await self.c.compose.up(req, self.env)
                break
            except (TagTooRecent, TagNotFound) as exc:
                return _fail(f"compose-manager refused the tag {req.tag}: {self.redactor.scrub(exc.detail)}")
            except (ServerError, TransportError) as exc:
                # A dry run plans only, and docker/ps is compared around it: safe to ask again,
                # unless it changed something (then the comparison below halts the run).
                if attempt >= 3:
                    return _fail(f"the dry run failed {attempt} times: {self.redactor.scrub(str(exc))}")
                if _snapshot(await self._ps()) != before:
                    return _halt("a dry run that failed also changed real containers (docker/compose#14029); inspect the host")
                self.log.warning("dry_run_retried", error=type(exc).__name__)
                await self._wait()
        after = _snapshot(await self._ps())
        changed = sorted(n for n in set(before) | set(after) if before.get(n, (None,))[:2] != after.get(n, (None,))[:2])
        if changed:
            return _halt(
                "a dry run changed real containers (" + ", ".join(changed) + "): docker/compose#14029. "
                "Nothing more is sent; inspect the host before resuming"
            )
        lines = outcome.lines
        self._journal_read("dry_run", req, {"status": outcome.status, "exit_code": outcome.exit_code, "lines": lines[-40:]})
        if outcome.status != "success":
            return _fail(f"the dry run did not succeed ({outcome.status}, exit {outcome.exit_code}): " + " | ".join(lines[-3:]))
        if step.plan.tag_only:
            return _ok(f"tag {req.tag} and {req.file} accepted by compose-manager (dry run only)")
        plan = parse_dry_run(lines, project=self.entry.project)
        # `change: selected` means the services the request already names
        listed = list(req.services) if step.plan.change == "selected" else list(step.plan.change or req.services)
        verdict = judge_plan(plan, listed, may_also=step.plan.may_also, allow_unchanged=step.plan.allow_unchanged)
        self.ctx["plans"][node.id] = {"actions": dict(plan.actions), "verdict": verdict.verdict}
        if verdict.verdict == "refuse":
            quoted = (" Plan lines: " + " | ".join(verdict.quoted)) if verdict.quoted else ""
            return _fail(f"dry run of {', '.join(req.services)} from {req.file}@{req.tag}: {verdict.reason}.{quoted}")
        if step.plan.select_changed:
            self.ctx["selected"] = verdict.changed
        if verdict.verdict == "skip":
            return StepOutcome(Event.SKIP, verdict.reason)
        self.ctx["checked_dry_run"] = {"tag": req.tag, "file": req.file, "services": list(req.services), "project": req.project,
                                       "after": {k: list(v) for k, v in after.items()}}
        return _ok(verdict.reason)

    def _journal_read(self, kind: str, req: ComposeRequest, outcome: dict[str, Any]) -> None:
        """A non-mutating effect is journaled after the fact (nothing to reconcile on resume)."""
        eff = self.journal.record_intent(self.lease, self.run.run_id, self.visit_key, kind,
                                         self.redactor.scrub_obj(req.redacted()), mutating=False)
        self.journal.record_outcome(self.lease, self.run.run_id, eff.effect_id, self.redactor.scrub_obj(outcome))

    async def _mutating(
        self, kind: str, req: ComposeRequest, baseline: dict[str, Any], call: Callable[[], Awaitable[StreamOutcome]]
    ) -> dict[str, Any]:
        """Journal intent, call once, journal the outcome. On resume, reuse what was recorded."""
        for eff in reversed(self.journal.effects(self.run.run_id)):
            if eff.step == self.visit_key and eff.kind == kind:
                if eff.outcome is not None:
                    self.log.info("effect_reused", kind=kind, status=eff.outcome.get("status"))
                    return dict(eff.outcome) | {"baseline": eff.request.get("baseline", {})}
                self.log.warning("effect_outcome_unknown_after_crash", kind=kind)
                outcome = {"status": "unknown", "error": "the runner stopped after sending; outcome not recorded"}
                self.journal.record_outcome(self.lease, self.run.run_id, eff.effect_id, outcome)
                return outcome | {"baseline": eff.request.get("baseline", {})}
        intent = self.journal.record_intent(
            self.lease, self.run.run_id, self.visit_key, kind,
            self.redactor.scrub_obj({"request": req.redacted(), "baseline": baseline}), mutating=True,
        )
        self._emit("effect", action=kind, services=list(req.services), file=req.file, tag=req.tag)
        try:
            res = await call()
            outcome: dict[str, Any] = {"status": res.status, "exit_code": res.exit_code,
                                       "lines": [self.redactor.scrub(x) for x in res.lines[-30:]],
                                       "error": self.redactor.scrub(res.error or "")}
        except (Busy, TransportError) as exc:
            # refused before acting (409 after bounded waits) or never reached the server
            outcome = {"status": "refused", "error": self.redactor.scrub(f"{type(exc).__name__}: {exc}")}
        except ServerError as exc:
            outcome = {"status": "unknown", "error": self.redactor.scrub(f"{type(exc).__name__}: {exc}")}
        except ClientError as exc:
            outcome = {"status": "refused", "error": self.redactor.scrub(f"{type(exc).__name__}: {exc}")}
        self.journal.record_outcome(self.lease, self.run.run_id, intent.effect_id, outcome)
        self.log.info("effect_outcome", kind=kind, status=outcome["status"])
        return outcome | {"baseline": baseline}

    async def _up(self, node: Node, step: Step) -> StepOutcome:
        assert self.env is not None
        req = self._request(step, dry_run=False)
        checked = self.ctx.get("checked_dry_run")
        if not checked or (checked["tag"], checked["file"], checked["services"], checked["project"]) != (
            req.tag, req.file, list(req.services), req.project
        ):
            return _halt("refusing to apply: no checked dry run of this exact request precedes it")
        containers = await self._ps()
        now = _snapshot(containers)
        if {k: tuple(v[:2]) for k, v in checked["after"].items()} != {k: v[:2] for k, v in now.items()}:
            self.ctx.pop("checked_dry_run", None)
            retries = self.ctx["retries"].get(node.id, 0)
            if retries < 1:
                self.ctx["retries"][node.id] = retries + 1
                return StepOutcome(Event.RETRY, "containers changed since the dry run: planning again")
            return _fail("containers keep changing between the dry run and the apply")
        by_svc = _by_service(containers)
        baseline = {"ids": {s: (by_svc[s].id if s in by_svc else None) for s in req.services},
                    "actions": len(await self.c.compose.action_log())}
        env = self.env
        outcome = await self._mutating("compose_up", req, baseline, lambda: self.c.compose.up(req, env))
        self.ctx.pop("checked_dry_run", None)
        status = outcome["status"]
        if status == "success":
            self.ctx.setdefault("deployed", {}).update({s: {"tag": req.tag, "file": req.file} for s in req.services})
            return _ok(f"applied {', '.join(req.services)} from {req.file}@{req.tag}")
        if status == "failure":
            return _fail(f"compose up failed (exit {outcome.get('exit_code')}): " + " | ".join(outcome.get("lines", [])[-3:]))
        if status == "refused":
            return _fail(f"compose-manager did not run the up: {outcome.get('error')}")
        # unknown: observe, never resend blindly
        verdict = await self._settle_up(req, outcome["baseline"])
        if verdict == "applied":
            self.ctx.setdefault("deployed", {}).update({s: {"tag": req.tag, "file": req.file} for s in req.services})
            return _ok("the up's stream broke, but the action log and docker/ps show it took effect")
        if verdict == "not_applied":
            retries = self.ctx["retries"].get(node.id, 0)
            if retries < 1:
                self.ctx["retries"][node.id] = retries + 1
                return StepOutcome(Event.RETRY, "the up's stream broke before it took effect (docker/ps unchanged): planning again")
            return _fail("the up did not take effect twice")
        return _halt("the up's outcome could not be established from docker/ps and the action log: " + verdict)

    async def _settle_up(self, req: ComposeRequest, baseline: dict[str, Any]) -> str:
        deadline = self.clock.monotonic() + SETTLE_S
        base_ids = baseline.get("ids", {})
        while True:
            actions = await self.c.compose.action_log()
            new_actions = actions[baseline.get("actions", 0):]
            recorded = any(a.action == "compose_up" and a.tag == req.tag and a.file == req.file
                           and (not a.services or set(req.services) <= set(a.services)) for a in new_actions)
            by_svc = _by_service(await self._ps())
            changed = [s for s in req.services if s in by_svc and by_svc[s].id != base_ids.get(s)]
            if recorded and len(changed) == len(req.services):
                return "applied"
            if self.clock.monotonic() >= deadline:
                if not recorded and not changed:
                    return "not_applied"
                return f"action recorded: {recorded}; changed: {changed or 'none'} of {list(req.services)}"
            await self._wait()

    async def _serving(self, services: list[str]) -> list[str]:
        """Which of `services` are not serving (absent, not running, or restarting)."""
        by_svc = _by_service(await self._ps())
        bad = []
        for s in services:
            c = by_svc.get(s)
            if c is None or c.state != "running" or c.restarting:
                bad.append(s)
        return bad

    async def _down(self, node: Node, step: Step) -> StepOutcome:
        assert self.env is not None
        req = self._request(step, dry_run=False)
        if step.requires_serving:
            not_serving = await self._serving(step.requires_serving)
            if not_serving:
                return _fail(
                    f"refusing to stop {', '.join(req.services)}: {', '.join(not_serving)} is not serving, and stopping it now "
                    f"would leave {self.run.host}'s long tier with no replica. Wait until it serves, then resume"
                )
        by_svc = _by_service(await self._ps())
        present = [s for s in req.services if s in by_svc]
        if not present and not any(e.step == self.visit_key for e in self.journal.effects(self.run.run_id)):
            return _ok(f"{', '.join(req.services)} not running: nothing to stop")
        baseline = {"ids": {s: (by_svc[s].id if s in by_svc else None) for s in req.services}}
        env = self.env
        outcome = await self._mutating("compose_down", req, baseline, lambda: self.c.compose.down(req, env))
        if outcome["status"] == "refused":
            return _fail(f"compose-manager did not run the down: {outcome.get('error')}")
        return await self._wait_gone(req, outcome)

    async def _wait_gone(self, req: ComposeRequest, first: dict[str, Any]) -> StepOutcome:
        assert self.env is not None
        timeout = self.rb.timeouts.gone
        deadline = self.clock.monotonic() + timeout
        resends = 0
        # Time a down may legitimately take before a still-running container means it had no effect.
        no_effect_after = self.clock.monotonic() + self.rb.timeouts.stop_grace + 4 * self.poll
        base_ids = first.get("baseline", {}).get("ids", {})
        zombie_polls = 0
        self._emit("waiting", gate=f"docker/ps no longer lists {', '.join(req.services)}")
        while True:
            by_svc = _by_service(await self._ps())
            left = [by_svc[s] for s in req.services if s in by_svc]
            if not left:
                return _ok(f"{', '.join(req.services)} gone from docker/ps")
            zombies = [c for c in left if c.state in ("removing", "dead")]
            still = [c for c in left if c.state == "running" and c.id == base_ids.get(c.service or c.name)]
            zombie_polls = zombie_polls + 1 if zombies and len(zombies) == len(left) else 0
            resend_reason = None
            if zombie_polls >= 3:
                resend_reason = "zombie: " + ", ".join(f"{c.name} {c.state}" for c in zombies)
            elif still and self.clock.monotonic() >= no_effect_after and first.get("status") != "success":
                resend_reason = "the down had no observable effect"
            if resend_reason:
                if resends >= MAX_DOWN_RESENDS:
                    return _fail(f"{', '.join(c.name for c in left)} still listed after {resends + 1} downs ({resend_reason})")
                resends += 1
                zombie_polls = 0
                env = self.env
                self.log.warning("down_resent_after_observation", reason=resend_reason)
                self._emit("note", text=f"sending the down again after observation ({resend_reason})")
                first = await self._mutating(f"compose_down_resend_{resends}", req, {"ids": base_ids},
                                             lambda: self.c.compose.down(req, env))
                # the gate starts again from the end of the new down: observe before judging
                no_effect_after = self.clock.monotonic() + self.rb.timeouts.stop_grace + 4 * self.poll
                deadline = self.clock.monotonic() + timeout
                continue
            if self.clock.monotonic() >= deadline:
                return _fail(f"{', '.join(c.name for c in left)} still listed after {int(timeout)} s")
            await self._wait()

    # -- gates -------------------------------------------------------------------------------------
    def _service_file(self, service: str) -> str:
        known = self.ctx.get("deployed", {}).get(service) or self.ctx["previous"].get(service)
        return known["file"] if known else self.rb.file

    async def _logs(self, node: Node, step: Step) -> StepOutcome:
        assert step.logs is not None
        service = step.logs.service
        # Did the last dry run of this phase plan to (re)create it? If it was already serving, no cold start.
        plan_actions = {}
        for sid in reversed(self.table.order):
            n = self.table.nodes[sid]
            if n.phase == node.phase and n.step is not None and n.step.dry_run is not None and sid in self.ctx["plans"]:
                acts = self.ctx["plans"][sid]["actions"]
                if service in acts:
                    plan_actions = acts
                    break
        if plan_actions.get(service) == "unchanged":
            bad = await self._serving([service])
            if not bad:
                return _ok(f"{service} was already serving on this definition: no cold start")
        expected = self.ctx.get("budget", {}).get("rank_budget_bytes") if step.logs.budget else None
        if step.logs.budget and expected is None:
            b = self.rb.budget
            expected = per_rank_bytes(parse_budget(b.default).bytes, b.ranks_per_replica)
        g = self.rb.log_gates
        gate = LogGate(g.ranks, list(g.required_per_rank), list(g.required), list(g.forbidden), expected_rank_budget=expected)
        file = self._service_file(service)
        project = self.entry.project

        async def fetch(tail: int) -> str:
            return await self.c.compose.logs(file, [service], tail, project)

        follower = LogFollower(fetch)
        deadline = self.clock.monotonic() + self.rb.timeouts.cold_start
        first_id: str | None = None
        shown = ""
        self._emit("waiting", gate=f"{service}: " + ", ".join(gate.missing()))
        while True:
            by_svc = _by_service(await self._ps())
            c = by_svc.get(service)
            if c is not None:
                if first_id is None:
                    first_id = c.id
                if c.id != first_id:
                    return _fail(f"{service} restarted during its cold start (container ID changed)")
                if c.restarting:
                    return _fail(f"{service} is restarting ({c.status})")
                if c.state in ("exited", "dead"):
                    batch = await follower.poll()
                    for ln in batch.new:
                        gate.feed(ln.text)
                    why = gate.result.reason if gate.result.failed else f"last line: {gate.result.line}"
                    return _fail(f"{service} exited during its cold start ({c.status}); {why}")
                batch = await follower.poll()
                if batch.gap:
                    self._emit("note", text=f"{service}: log lines may have been missed (gap in the tail window)")
                for ln in batch.new:
                    res = gate.feed(ln.text)
                    if res.failed:
                        return _fail(f"{service}: {res.reason}: {self.redactor.scrub(res.line)[:300]}")
                    if res.passed:
                        return _ok(f"{service}: {res.reason}")
                if batch.new and gate.result.line and gate.result.line != shown:
                    shown = gate.result.line
                    self._emit("log_line", service=service, line=self.redactor.scrub(shown)[:200])
            if self.clock.monotonic() >= deadline:
                return _fail(
                    f"{service} did not finish its cold start within {int(self.rb.timeouts.cold_start // 60)} min; missing: "
                    + "; ".join(gate.missing())
                )
            await self._wait()

    async def _relay(self, step: Step) -> StepOutcome:
        assert step.relay is not None and self.env is not None
        token = self.env.get("PROXY_TOKEN", "")
        url = self.entry.relay_url(step.relay.port)
        client = self.c.relay(url, token)
        deadline = self.clock.monotonic() + self.rb.timeouts.relay
        self._emit("waiting", gate=f"soak relay :{step.relay.port} direct checks")
        while True:
            res = await client.direct_checks(self.rb.model)
            if res.ok:
                return _ok(f"relay :{step.relay.port}: /health ok, /v1/models lists {self.rb.model}, deterministic generation non-empty")
            if self.clock.monotonic() >= deadline:
                return _fail(f"relay :{step.relay.port} direct checks failed: {self.redactor.scrub(res.reason)}")
            await self._wait()

    async def _verify(self, step: Step) -> StepOutcome:
        assert step.verify is not None
        addr = self.entry.model_proxy_address
        if step.verify.peers:
            deadline = self.clock.monotonic() + self.rb.timeouts.discovery
            self._emit("waiting", gate=f"both peers list {addr} healthy under {self.rb.domains.long} only")
            while True:
                problems = []
                for peer in self.c.peers:
                    long_p = await peer.presence(addr, self.rb.domains.long)
                    base_p = await peer.presence(addr, self.rb.domains.base)
                    if not (long_p.listed and long_p.healthy):
                        problems.append(f"{peer.name} does not list {addr} healthy under {self.rb.domains.long}")
                    if base_p.listed:
                        problems.append(f"{peer.name} lists {addr} under the base domain {self.rb.domains.base}")
                if not problems:
                    break
                if self.clock.monotonic() >= deadline:
                    return _fail("; ".join(problems))
                await self._wait()
        if step.verify.completion:
            res = await self.c.inference.cache_hit_check(self.rb.model)
            if not res.ok:
                return _fail(f"completion check on {self.rb.domains.long}: {self.redactor.scrub(res.reason)}")
        return _ok(f"both peers list {addr} healthy under the long domain only; completion and cache-hit follow-up passed")

    async def _soak(self, node: Node, step: Step) -> StepOutcome:
        assert step.soak is not None
        duration = self.soak_override if self.soak_override is not None else step.soak.duration
        key = f"soak_started:{node.id}"
        start = self.ctx.get(key)
        now = self.clock.monotonic()
        if start is None or start > now:  # a resumed run on another clock restarts the soak
            start = now
            self.ctx[key] = start
        need_approval = step.soak.approval and not self.yes
        announced = False
        while True:
            elapsed = self.clock.monotonic() - start
            approved = (not need_approval) or bool({node.id, "*"} & self.journal.approvals(self.run.run_id))
            if elapsed >= duration and approved:
                if step.soak.approval and self.yes:
                    self.journal.approve(self.run.run_id, node.id, by="--yes")
                return _ok(f"soaked {int(duration)} s" + (" and approved" if step.soak.approval else ""))
            if not announced:
                gate = f"soak {int(duration)} s"
                if need_approval:
                    gate += f", then `orchestrate approve {self.run.run_id}`"
                self._emit("waiting", gate=gate)
                announced = True
            await self._wait(min(self.poll, max(0.0, duration - elapsed)) if elapsed < duration else self.poll)


async def run_with_heartbeat(executor: Executor, journal: Journal, ttl_s: float) -> RunRecord:
    """Run the executor while renewing the lease every third of its TTL (wall-clock)."""
    lost: list[BaseException] = []

    async def beat() -> None:
        while True:
            await asyncio.sleep(ttl_s / 3)
            try:
                executor.lease = journal.heartbeat(executor.lease, ttl_s)
            except (LeaseLost, Fenced) as exc:
                lost.append(exc)
                main.cancel()
                return

    main = asyncio.current_task()
    hb = asyncio.create_task(beat())
    try:
        return await executor.run_to_end()
    except asyncio.CancelledError:
        if lost:
            raise RunnerFenced(str(lost[0])) from None
        raise
    finally:
        hb.cancel()


__all__ = ["Executor", "RunnerFenced", "run_with_heartbeat"]
