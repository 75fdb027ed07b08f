"""The pure state machine of a run: states, events and a transition table, as data.

Like h11's `_state.py`, this module never touches the network, the clock or the disk. The table
is compiled from a runbook; the executor performs each state's effect and feeds back one event.
`plan` and `status` render from the same table. An event the table does not allow in the current
state raises `IllegalTransition`.

Events:
  OK     the state's gate passed
  FAIL   the gate failed: take the phase's rollback (preflight: ABORTED; inside a rollback: HALTED)
  SKIP   a dry run found the listed services already up to date: skip its paired up
  RETRY  an up's outcome was unknown and observation showed it did not take effect: plan again
  REMEDY a cold-start gate failed on its remedy's log marker, and the remedy was taken fewer times
         than its cap (`Table.remedy_caps`): run the remedy's steps, then the gate again
  ABORT  the operator asked to abort: the current phase's rollback (or the whole-host rollback
         once an earlier replica has moved)
  HALT   an outcome could not be established, or the run lost its lease: a human must act
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Literal

from orchestrator.language.runbook import Phase, Runbook, Step
from orchestrator.util.outcome import Outcome


class Event(str, Enum):  # noqa: UP042  # StrEnum would change str(Event.OK) from "Event.OK" in messages and the journal
    OK = "ok"
    FAIL = "fail"
    SKIP = "skip"
    RETRY = "retry"
    REMEDY = "remedy"
    ABORT = "abort"
    HALT = "halt"


DONE, ROLLED_BACK, ABORTED, HALTED = Outcome.DONE, Outcome.ROLLED_BACK, Outcome.ABORTED, Outcome.HALTED
TERMINALS: tuple[str, ...] = tuple(Outcome)

#: How often an `up` may go back to its dry run (RETRY) before its gate fails: once after an
#: unknown outcome that observation showed did not take effect, or after containers or the env map
#: changed between the dry run and the apply. Owned by the table, not by the executor.
UP_RETRY_CAP = 1

Section = Literal["preflight", "forward", "remedy", "rollback", "full_rollback", "terminal"]


class IllegalTransition(Exception):
    def __init__(self, state: str, event: Event) -> None:
        super().__init__(f"event {event.value!r} is not allowed in state {state!r}")
        self.state, self.event = state, event


@dataclass(frozen=True)
class Node:
    id: str
    section: Section
    phase: str | None = None
    replica: str | None = None
    step: Step | None = None
    #: For a rollback that ends HALTED: the message the operator gets.
    halt_message: str | None = None


@dataclass(frozen=True)
class Table:
    kind: str
    start: str
    nodes: dict[str, Node]
    edges: dict[tuple[str, Event], str]
    order: tuple[str, ...] = field(default=())
    #: forward phase name -> its first state (where `resume --retry` and placement start)
    phase_starts: dict[str, str] = field(default_factory=dict)
    #: up state -> the dry-run state that covers it (where RETRY goes, at most UP_RETRY_CAP times)
    covering_dry_run: dict[str, str] = field(default_factory=dict)
    #: gate state -> how many REMEDY events it may send in one run before its marker fails it
    remedy_caps: dict[str, int] = field(default_factory=dict)
    #: remedy state -> the gate state whose remedy it belongs to (where the remedy goes back to)
    remedy_of: dict[str, str] = field(default_factory=dict)
    #: forward phase name -> where `resume --retry` restarts after it failed: its own start, or the
    #: start of the earlier phase its `retry_from` names (a phase that assumes what that one did)
    retry_starts: dict[str, str] = field(default_factory=dict)

    def retry_cap(self, state: str) -> int:
        """How many RETRY events `state` may send before it must fail instead."""
        return UP_RETRY_CAP if state in self.covering_dry_run else 0

    def remedy_cap(self, state: str) -> int:
        """How often `state` may take its remedy in one run (0: it has none)."""
        return self.remedy_caps.get(state, 0) if (state, Event.REMEDY) in self.edges else 0

    def phase_start(self, phase: str) -> str:
        try:
            return self.phase_starts[phase]
        except KeyError:
            raise ValueError(f"the runbook has no forward phase {phase!r}") from None

    def retry_start(self, phase: str) -> str:
        """Where `resume --retry` restarts a run whose failure was in `phase`."""
        return self.retry_starts.get(phase) or self.phase_start(phase)

    def phase_dry_runs(self, phase: str | None) -> list[str]:
        """The dry-run states of a phase, in reading order."""
        return [s for s in self.order
                if (n := self.nodes[s]).phase == phase and n.step is not None and n.step.dry_run is not None]

    def next(self, state: str, event: Event) -> str:
        try:
            return self.edges[(state, event)]
        except KeyError:
            raise IllegalTransition(state, event) from None

    def allows(self, state: str, event: Event) -> bool:
        return (state, event) in self.edges


class Machine:
    """The run's current state; `send` applies one event through the table."""

    def __init__(self, table: Table, state: str | None = None) -> None:
        self.table = table
        self.state = state or table.start
        if self.state not in table.nodes:
            raise IllegalTransition(self.state, Event.OK)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINALS

    def send(self, event: Event) -> str:
        if self.terminal:
            raise IllegalTransition(self.state, event)
        self.state = self.table.next(self.state, event)
        return self.state


# -- compiling a runbook into a table -------------------------------------------------------------


class _Builder:
    """A table being compiled: its maps filled in place; its start and reading order set last."""

    def __init__(self, kind: str) -> None:
        self.t = Table(kind, "", {t: Node(t, "terminal") for t in TERMINALS}, {})
        self.order: list[str] = []

    def table(self, start: str) -> Table:
        return replace(self.t, start=start, order=tuple(_ordered(self.t.edges, self.order, start)))

    def add(self, node: Node) -> None:
        if node.id in self.t.nodes:
            raise ValueError(f"state {node.id!r} defined twice")
        self.t.nodes[node.id] = node
        self.order.append(node.id)

    def edge(self, state: str, event: Event, to: str) -> None:
        self.t.edges[(state, event)] = to


def _skip_target(ids: list[str], steps: list[Step], i: int, after: str) -> str:
    """Where SKIP from dry run `i` goes: the step after its paired up (without one, after the dry run)."""
    j = next((j for j in range(i + 1, len(steps)) if steps[j].up is not None), i)
    return ids[j + 1] if j + 1 < len(ids) else after


def _chain(
    b: _Builder,
    prefix: str,
    steps: list[Step],
    *,
    section: Section,
    phase: str | None,
    replica: str | None,
    after: str,
    on_fail: str,
    on_abort: str | None,
    halt_message: str | None = None,
) -> str:
    """Add one list of steps; returns the id of its first state (or `after` if it is empty)."""
    ids = [f"{prefix}.{s.id}" for s in steps]
    for i, s in enumerate(steps):
        b.add(Node(ids[i], section, phase, replica, s, halt_message))
    for i, s in enumerate(steps):
        nxt = ids[i + 1] if i + 1 < len(ids) else after
        b.edge(ids[i], Event.OK, nxt)
        b.edge(ids[i], Event.FAIL, on_fail)
        b.edge(ids[i], Event.HALT, HALTED)
        if on_abort is not None:
            b.edge(ids[i], Event.ABORT, on_abort)
        if s.dry_run is not None and s.plan is not None and s.plan.allow_unchanged:
            b.edge(ids[i], Event.SKIP, _skip_target(ids, steps, i, after))
        if s.check == "host_state":
            # the host already runs the target: nothing to do
            b.edge(ids[i], Event.SKIP, DONE)
        if s.up is not None:
            # back to the dry run that covers this up (the loader guarantees one precedes it)
            for j in range(i - 1, -1, -1):
                if steps[j].dry_run is not None:
                    b.edge(ids[i], Event.RETRY, ids[j])
                    b.t.covering_dry_run[ids[i]] = ids[j]
                    break
        if s.remedy is not None:
            if section != "forward":
                raise ValueError(f"{ids[i]}: a remedy belongs to a gate of a forward phase")
            # the remedy's chain: its failures and aborts go where the gate's do; it ends back at
            # the gate, which reads the engine's log afresh (and is capped by the table)
            first = _chain(b, f"{ids[i]}.remedy", s.remedy.steps, section="remedy", phase=phase, replica=replica,
                           after=ids[i], on_fail=on_fail, on_abort=on_abort, halt_message=halt_message)
            b.edge(ids[i], Event.REMEDY, first)
            b.t.remedy_caps[ids[i]] = s.remedy.max
            for r in s.remedy.steps:
                b.t.remedy_of[f"{ids[i]}.remedy.{r.id}"] = ids[i]
    return ids[0] if ids else after


def _full_rollback(b: _Builder, phases: list[Phase], *, end: str) -> str:
    start = end
    # build back to front so each phase knows where it continues
    for ph in reversed(phases):
        start = _chain(
            b, ph.name, ph.steps, section="full_rollback", phase=ph.name, replica=ph.replica,
            after=start, on_fail=HALTED, on_abort=None,
        )
    return start


def compile_rollout(rb: Runbook, start_phase: str | None = None) -> Table:
    """The rollout's table. `start_phase` (host-state placement, journaled in the run) is where
    preflight hands over: the first forward phase by default."""
    b = _Builder("rollout")
    # Whole-host rollback (safe order) first, so abort targets exist.
    full_start = _full_rollback(b, rb.full_rollback, end=ROLLED_BACK) if rb.full_rollback else None

    # Forward phases, back to front.
    after: str = DONE
    for idx in range(len(rb.phases) - 1, -1, -1):
        ph = rb.phases[idx]
        moved_before = any(p.replica for p in rb.phases[:idx])
        if ph.rollback is not None:
            rb_end = {"rolled_back": ROLLED_BACK, "halted": HALTED, "aborted": ABORTED}[ph.rollback.ends]
            rb_start = _chain(
                b, f"{ph.name}.rollback", ph.rollback.steps, section="rollback", phase=ph.name,
                replica=ph.replica, after=rb_end, on_fail=HALTED, on_abort=None,
                halt_message=ph.rollback.message,
            )
            if not ph.rollback.steps and rb_end in (HALTED, ABORTED):
                # an empty rollback that halts or aborts still has to carry its message: a marker state
                marker = f"{ph.name}.rollback.{'halt' if rb_end == HALTED else 'abort'}"
                b.add(Node(marker, "rollback", ph.name, ph.replica, None, ph.rollback.message))
                b.edge(marker, Event.OK, rb_end)
                b.edge(marker, Event.HALT, HALTED)
                rb_start = marker
        else:
            rb_start = HALTED
        abort_to = full_start if (moved_before and full_start) else rb_start
        start = _chain(
            b, ph.name, ph.steps, section="forward", phase=ph.name, replica=ph.replica,
            after=after, on_fail=rb_start, on_abort=abort_to,
        )
        b.t.phase_starts[ph.name] = start
        after = start

    for ph in rb.phases:
        b.t.retry_starts[ph.name] = b.t.phase_starts[ph.retry_from or ph.name]
    first_forward = after if start_phase is None else b.t.phase_start(start_phase)
    pre_start = _chain(
        b, "preflight", rb.preflight, section="preflight", phase="preflight", replica=None,
        after=first_forward, on_fail=ABORTED, on_abort=ABORTED,
    )
    return b.table(pre_start)


def compile_rollback(rb: Runbook, replicas: Iterable[str]) -> Table:
    """A standalone whole-host (or one-replica) rollback: env map first, then the safe order."""
    wanted = set(replicas)
    phases = [ph for ph in rb.full_rollback if ph.replica in wanted]
    if not phases:
        raise ValueError(f"the runbook has no rollback for {sorted(wanted)}")
    b = _Builder("rollback")
    start = _full_rollback(b, phases, end=ROLLED_BACK)
    env_steps = [s for s in rb.preflight if s.check == "env_map"]
    pre = _chain(
        b, "preflight", env_steps, section="preflight", phase="preflight", replica=None,
        after=start, on_fail=ABORTED, on_abort=ABORTED,
    )
    return b.table(pre)


def _ordered(edges: dict[tuple[str, Event], str], added: list[str], start: str) -> list[str]:
    """States in reading order: the happy path first (a gate's remedy right after its gate), then
    every rollback chain (in the order they were added)."""
    seen: list[str] = []
    cur = start
    while cur not in TERMINALS and cur not in seen:
        seen.append(cur)
        rem = edges.get((cur, Event.REMEDY))
        while rem is not None and rem not in TERMINALS and rem not in seen:
            seen.append(rem)
            rem = edges[(rem, Event.OK)]
        cur = edges[(cur, Event.OK)]
    seen.extend(s for s in added if s not in seen)
    return seen
