"""The transition table compiled from the gpu02 runbook: every gate's failure path, and the
invariants a random walk through the table keeps (hypothesis)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.language.machine import (
    ABORTED,
    DONE,
    HALTED,
    ROLLED_BACK,
    Event,
    IllegalTransition,
    Machine,
    compile_rollback,
    compile_rollout,
)
from orchestrator.language.runbook import load_runbook

RB = load_runbook()
T = compile_rollout(RB)


def test_happy_path_goes_r2_then_r1_then_reconcile():
    m = Machine(T)
    seen = []
    while not m.terminal:
        seen.append(m.state)
        m.send(Event.OK)
    assert m.state == DONE
    phases = [T.nodes[s].phase for s in seen]
    assert phases.index("r2") < phases.index("r1") < phases.index("reconcile")
    assert seen[0] == "preflight.read-env"


def test_preflight_failures_abort_without_change():
    for sid in T.order:
        if T.nodes[sid].section == "preflight":
            assert T.next(sid, Event.FAIL) == ABORTED


def test_r2_failures_take_the_r2_rollback_to_rolled_back():
    for sid in T.order:
        n = T.nodes[sid]
        if n.section == "forward" and n.phase == "r2":
            target = T.next(sid, Event.FAIL)
            assert target == "r2.rollback.perception-stop"
    m = Machine(T, "r2.rollback.perception-stop")
    while not m.terminal:
        m.send(Event.OK)
    assert m.state == ROLLED_BACK


def test_r1_failures_stop_r1_and_halt_and_abort_goes_whole_host():
    for sid in T.order:
        n = T.nodes[sid]
        if n.section == "forward" and n.phase == "r1":
            assert T.next(sid, Event.FAIL) == "r1.rollback.perception-stop"
            assert T.next(sid, Event.ABORT) == "rollback-r2.perception-stop"
    m = Machine(T, "r1.rollback.perception-stop")
    while not m.terminal:
        m.send(Event.OK)
    assert m.state == HALTED
    assert "r2 alone" in T.nodes["r1.rollback.stop-new"].halt_message


def test_rollback_failures_halt_and_illegal_events_raise():
    assert T.next("r2.rollback.up-old", Event.FAIL) == HALTED
    with pytest.raises(IllegalTransition):
        Machine(T, "r2.rollback.up-old").send(Event.ABORT)
    with pytest.raises(IllegalTransition):
        Machine(T, "preflight.read-env").send(Event.RETRY)
    m = Machine(T, DONE)
    with pytest.raises(IllegalTransition):
        m.send(Event.OK)


def test_whole_host_rollback_is_r2_first():
    t = compile_rollback(RB, ["r2", "r1"])
    m = Machine(t)
    order = []
    while not m.terminal:
        order.append(m.state)
        m.send(Event.OK)
    assert m.state == ROLLED_BACK
    first_r1 = next(i for i, s in enumerate(order) if s.startswith("rollback-r1"))
    assert all(s.startswith(("preflight", "rollback-r2")) for s in order[:first_r1])


ENGINES = {"r1": "model-sg-glm53-w4afp8-tp4-r1", "r2_old": "model-sg-glm53-fp8-tp4-r2", "r2_new": "model-sg-glm53-w4afp8-tp4-r2"}


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_random_walks_keep_the_invariants(data):
    """Drive the table with random observations (drawn among the events legal in each state).

    Checked on the effects the walk performs: an up only right after a dry run of the same
    request, never an empty services list, never both engine slots stopped at once (the executor
    halts before a down that would stop the last running replica: modelled here), and every
    failure ends ROLLED_BACK, ABORTED or HALTED."""
    m = Machine(T)
    running = {ENGINES["r1"], ENGINES["r2_old"]}
    last_dry = None
    failed = False
    for _ in range(300):
        if m.terminal:
            break
        allowed = sorted((e for e in Event if T.allows(m.state, e)), key=lambda e: e.value)
        weighted = [Event.OK] * 40 + allowed if Event.OK in allowed else allowed
        ev = data.draw(st.sampled_from(weighted))
        step = T.nodes[m.state].step
        if step is not None and step.down is not None and ev is Event.OK:
            # the executor's stop guard (tests/executor): an engine that runs is stopped only while
            # an engine of another replica runs; otherwise the run halts with the host untouched
            stopping = [x for x in step.down.services if x in running and RB.replica_of(x)]
            reps = {RB.replica_of(x) for x in stopping}
            if stopping and not any(RB.replica_of(o) not in reps for o in running if RB.replica_of(o)):
                ev = Event.HALT
        if step is not None and ev is Event.OK:
            c = step.compose
            if c is not None:
                assert c.services, "empty services list"
                if step.dry_run is not None:
                    last_dry = c.key()
                elif step.up is not None:
                    assert last_dry == c.key(), f"{m.state}: up without a dry run of the same request"
                    last_dry = None
                    running |= {x for x in c.services if x.startswith("model-")}
                else:
                    last_dry = None
                    running -= set(c.services)
                    assert running & set(ENGINES.values()), f"{m.state}: both replicas down"
        if ev in (Event.FAIL, Event.HALT, Event.ABORT):
            failed = True
        m.send(ev)
    assert m.terminal
    if failed:
        assert m.state in (ROLLED_BACK, ABORTED, HALTED)
    else:
        assert m.state == DONE


def test_abort_during_r1_cold_start_cannot_stop_r2_without_a_serving_r1():
    """Abort after r1 was stopped: the whole-host rollback's first engine down needs r1 serving."""
    m = Machine(T)
    while m.state != "r1.cold-start":
        m.send(Event.OK)
    assert m.send(Event.ABORT) == "rollback-r2.perception-stop"
    assert m.send(Event.OK) == "rollback-r2.relay-stop"
    m.send(Event.OK)
    step = T.nodes[m.state].step
    assert m.state == "rollback-r2.stop-new"
    assert RB.replica_of(step.down.services[0]) == "r2"
    # the executor's stop guard halts (r1 does not serve): the run halts instead of stopping r2
    assert m.send(Event.HALT) == HALTED
