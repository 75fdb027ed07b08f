"""The run loop: run the current state's handler, feed the machine its event, journal the
transition with the run's context (the terminal one carries the message the operator reads)."""

from __future__ import annotations

import structlog

from orchestrator.engine.context import Failure, RunContext
from orchestrator.engine.executor.pause import honour_pause, observed
from orchestrator.engine.executor.rollback_summary import rollback_summary
from orchestrator.engine.executor.runtime import AbortRequested, ForeignChange, MaskedEnv, Runtime
from orchestrator.engine.progress import NullProgress, Progress
from orchestrator.engine.rules import targets
from orchestrator.engine.steps import StepOutcome, handler_for
from orchestrator.hosts.clients.errors import ClientError, RequestInvalid
from orchestrator.hosts.host_clients import HostClients
from orchestrator.hosts.inventory import HostEntry
from orchestrator.hosts.redaction import Redactor
from orchestrator.journal.audit import abort_note
from orchestrator.journal.base import Fenced, Lease, LeaseLost, RunRecord
from orchestrator.journal.sql import Journal
from orchestrator.language.machine import TERMINALS, Event, Machine, Node, Outcome, Table
from orchestrator.language.references import UnresolvedReference
from orchestrator.language.runbook import Runbook
from orchestrator.util.clock import Clock

log = structlog.get_logger("orchestrator.executor")


_VERB = {"fail": "failed", "halt": "halted", "abort": "aborted by an operator"}


class RunnerFenced(Exception):
    """This runner lost its lease: another runner owns the run now. Stop without writing."""


class Executor:
    def __init__(self, *, run: RunRecord, runbook: Runbook, table: Table, journal: Journal, lease: Lease,
                 clients: HostClients, entry: HostEntry, clock: Clock, poll_interval: float, redactor: Redactor,
                 progress: Progress | None = None, yes: bool = False, soak_override: float | None = None) -> None:
        self.run = run
        self.table = table
        self.journal = journal
        self.ctx = RunContext.from_json(run.context)
        if yes:
            self.ctx.yes = True  # journaled with the next transition: the run's stored --yes
        # Only the `yes` the caller passes skips approvals: a person's resume passes the stored --yes
        # (and says so); a run a server adopts never inherits it and waits for a human at every gate.
        self.machine = Machine(table, run.state)
        self.rt = Runtime(run=run, runbook=runbook, table=table, journal=journal, lease=lease, clients=clients,
                          entry=entry, clock=clock, poll_interval=poll_interval, redactor=redactor,
                          progress=progress or NullProgress(), ctx=self.ctx, yes=yes, soak_override=soak_override)

    async def run_to_end(self) -> RunRecord:
        rt = self.rt
        rt.emit("run_started", run_id=self.run.run_id, host=self.run.host, state=self.machine.state)
        while not self.machine.terminal:
            state = self.machine.state
            node = self.table.nodes[state]
            rt.visit.node = node
            rt.visit.key = f"{state}@{len(self.journal.transitions(self.run.run_id))}"
            rt.visit.log = log.bind(run_id=self.run.run_id, host=self.run.host, step=state)
            rt.emit("step_started", state=state, say=node.step.say if node.step else "", phase=node.phase)
            rt.log.info("step_started")
            try:
                if not any(e.step == rt.visit.key for e in self.journal.open_effects(self.run.run_id)):
                    # a call of this visit whose outcome is unknown is settled first (by its
                    # handler); an abort is honoured at the next wait or step
                    rt.check_abort()
                    await honour_pause(rt, state)  # an operator's pause, at a safe point only
                outcome = await self._perform(node)
            except AbortRequested:
                outcome = StepOutcome(Event.ABORT, abort_note(self.journal, self.run.run_id))
            except (Fenced, LeaseLost) as exc:
                raise RunnerFenced(str(exc)) from None
            except RequestInvalid as exc:
                outcome = StepOutcome(Event.HALT, f"refused to send an invalid request: {rt.scrub(str(exc))}")
            except (UnresolvedReference, MaskedEnv, ForeignChange) as exc:
                outcome = StepOutcome(Event.HALT, str(exc))
            except ClientError as exc:
                outcome = StepOutcome(Event.FAIL, rt.scrub(str(exc)))  # "system: detail", with the URL
            outcome = observed(rt, node, outcome)  # an observe-only gate records a failure and never fails
            to = self.table.next(state, outcome.event)
            host_now = await rt.host_now() if to in TERMINALS and to != Outcome.DONE else ""
            if to == Outcome.ROLLED_BACK and (summary := await rollback_summary(rt)):
                host_now = f"{summary}. {host_now}"
            try:
                self._transition(state, outcome, host_now)
            except (Fenced, LeaseLost) as exc:  # taken over during a step that wrote nothing
                raise RunnerFenced(str(exc)) from None
        return self.journal.get_run(self.run.run_id)

    async def _perform(self, node: Node) -> StepOutcome:
        if node.step is None:  # a marker state (an empty rollback that halts)
            return StepOutcome(Event.OK, "handing over to a human")
        if node.step.watch is not None:  # the step runs beside a watch of another replica
            from orchestrator.engine.executor.watch import run_watched

            return await run_watched(self.rt, node, handler_for(node.step))
        return await handler_for(node.step)(self.rt, node, node.step)

    def _transition(self, state: str, outcome: StepOutcome, host_now: str = "") -> None:
        to = self.machine.send(outcome.event)
        note = self.rt.scrub(outcome.note)
        in_rollback = self.table.nodes[state].section in ("rollback", "full_rollback")
        if outcome.event in (Event.FAIL, Event.HALT, Event.ABORT) and not (in_rollback and self.ctx.failure is not None):
            # the first failure is the one the operator must read: a rollback that fails after it
            # is told as "then <state> halted: <why>" (_final_message), never in its place
            here = outcome.retry_here and self.table.nodes[state].section == "forward"
            # an up goes back to its own dry run (its RETRY edge): an up is sent only after one
            retry_at = self.table.edges.get((state, Event.RETRY), state) if here else ""
            self.ctx.failure = Failure(state, outcome.event.value, note, retry_at)
        terminal = to in TERMINALS
        if not terminal and not in_rollback and self.table.nodes[to].section in ("rollback", "full_rollback"):
            from orchestrator.engine.steps.manual import manual_edits_ahead

            for edit in manual_edits_ahead(self.table, to):  # said up front, before the rollback runs
                self.rt.log.warning("rollback_needs_manual_edit", edit=edit)
                self.rt.emit("note", text=f"this rollback needs a human's edit: {edit}")
        message = self._final_message(state, to, note, outcome.event) if terminal else None
        if message and self.ctx.not_stopped and _LEFT not in message:  # a rollback left an engine it did not create
            message = message.rstrip(".") + f". {_LEFT}: " + "; ".join(self.ctx.not_stopped)
        if message and host_now:
            message = f"{message}. {host_now}" if not message.endswith(".") else f"{message} {host_now}"
        self.journal.record_transition(
            self.rt.lease, self.run.run_id, state, outcome.event.value, to,
            context=self.rt.context_json(), terminal=terminal,
            outcome=to if terminal else None, message=message, note=note or None,
        )
        self.rt.log.info("transition", on=outcome.event.value, to=to, note=note)
        self.rt.emit("transition", state=state, event_name=outcome.event.value, to=to, note=note)
        if terminal:
            self.rt.emit("run_finished", outcome=to, message=message)

    def _final_message(self, state: str, to: str, note: str, event: Event) -> str:
        """What the operator reads last: what failed and why, where the run ended, what to run next."""
        node = self.table.nodes[state]
        failure = self.ctx.failure
        why = f"{failure.state} {_VERB.get(failure.event, failure.event)}: {failure.reason}" if failure else ""
        operator_abort = failure is not None and failure.event == "abort"
        # the runbook's message tells of a rollback that ran to its end: a rollback step that halted
        # itself (a call refused for compose-manager's lock) is told by its own note instead
        if (to == Outcome.HALTED or (to == Outcome.ABORTED and not operator_abort)) and node.halt_message \
                and node.section == "rollback" and event != Event.HALT:
            if self.ctx.not_stopped:  # the runbook's message tells of a stop this rollback did not make
                return " ".join(f"{(why or note).rstrip('.')}. {_LEFT}: {'; '.join(self.ctx.not_stopped)}"
                                f"{self._next_steps(to)}".split())
            msg = node.halt_message.format(host=self.run.host, run_id=self.run.run_id, tag=self.run.tag)
            return " ".join((f"{why}. {msg}" if failure else msg).split())
        if to == Outcome.DONE:
            if node.step is not None and node.step.check == "host_state":
                return note  # nothing to do: the host already runs the target
            return f"{self.run.host}: every phase passed its gates"
        if failure is None:
            return f"{note}" + self._next_steps(to)
        if to == Outcome.ROLLED_BACK:
            return f"{why}. The rollback finished" + (f" ({state}: {note})" if state != failure.state and note else "")
        if to == Outcome.ABORTED:
            return f"{why}. Nothing was changed"
        tail = f"; then {state} halted: {note}" if state != failure.state and note else ""
        return f"{why}{tail}" + self._next_steps(to)

    def _next_steps(self, to: str) -> str:
        """What to run once a halted run's host is fixed (`resume` alone does nothing: it has ended)."""
        if to != Outcome.HALTED:
            return ""
        failure = self.ctx.failure
        node = self.table.nodes.get(failure.state) if failure is not None else None
        phase = node.phase if node is not None else None
        if self.run.kind == "rollout" and failure is not None and failure.retry_at:
            then = f"`orchestrate resume {self.run.run_id} --retry` sends the refused call again, from {failure.retry_at}"
        elif self.run.kind == "rollout" and phase in self.table.phase_starts:
            then = (f"`orchestrate resume {self.run.run_id} --retry` starts phase {phase} again, "
                    f"at {self.table.retry_start(phase)}")
        elif self.run.kind == "rollback":
            then = f"`{rollback_again(self.run.host, self.rt.rb, self.ctx)}` takes the host back again (the same target)"
        else:
            then = (f"`orchestrate rollout {self.run.host} --tag {self.run.tag}` places the host and goes on from its state, "
                    f"or `orchestrate rollback {self.run.host}`")
        return (f". Nothing more is sent. Look at the host (`orchestrate status {self.run.run_id}`); once it is fixed, {then}")


def rollback_again(host: str, rb: Runbook, ctx: RunContext) -> str:
    """A rollback run again, as a command that works from any machine: an explicit target is
    repeated with its runbook and replica (a machine without the rollout's journal refuses the plain one)."""
    refs = {(ref.get("tag"), ref.get("file")) for ref in ctx.previous.values() if isinstance(ref, dict)}
    if not (targets.explicit_target(ctx.previous_source) and len(refs) == 1):
        return f"orchestrate rollback {host}"
    tag, file = next(iter(refs))
    alone = len(ctx.replicas) == 1 and ctx.replicas != rb.rollback_replicas("all")
    return targets.rollback_command(host, rb.name, str(tag), str(file), ctx.replicas[0] if alone else None)


#: how a final message names the engines a rollback left running because this run did not create them
_LEFT = "The rollback left running what this run did not create"
