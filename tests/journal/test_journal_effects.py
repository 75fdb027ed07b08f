"""Effects: an intent before every HTTP call, an outcome after; open_effects finds the gaps."""

from __future__ import annotations

import pytest

from orchestrator.journal.base import EffectRecord, JournalError


def test_intents_outcomes_and_open_effects(journal, clock, make_run) -> None:
    run = make_run()
    lease, _ = journal.acquire_lease("gpu02", run.run_id, "runner-a", 600)

    clock.advance(1)
    probe = journal.record_intent(
        lease, run.run_id, "precheck", "http.get", {"url": "/docker/ps"}, mutating=False
    )
    assert probe == EffectRecord(
        run.run_id, 1, "precheck", "http.get", False, {"url": "/docker/ps"}, clock(), None, None
    )
    deploy = journal.record_intent(
        lease, run.run_id, "deploy", "http.post",
        {"url": "/deploy", "body": {"tag": "v1", "services": ["r1", "r2"]}}, mutating=True,
    )
    restart = journal.record_intent(
        lease, run.run_id, "restart", "http.post", {"url": "/restart/r1"}, mutating=True
    )
    assert [e.effect_id for e in (probe, deploy, restart)] == [1, 2, 3]
    assert [e.effect_id for e in journal.open_effects(run.run_id)] == [1, 2, 3]

    clock.advance(2)
    done = journal.record_outcome(lease, run.run_id, probe.effect_id, {"status": 200, "rows": 4})
    assert done.outcome == {"status": 200, "rows": 4}
    assert done.outcome_at == clock()
    assert done.request == probe.request and done.intent_at == probe.intent_at
    journal.record_outcome(lease, run.run_id, restart.effect_id, {"status": 202})

    open_now = journal.open_effects(run.run_id)
    assert open_now == [deploy]  # the mutating deploy: intent recorded, outcome unknown
    effects = journal.effects(run.run_id)
    assert [e.effect_id for e in effects] == [1, 2, 3]
    assert [e.mutating for e in effects] == [False, True, True]
    assert effects[0] == done
    assert effects[2].outcome == {"status": 202}


def test_an_outcome_is_recorded_once(journal, make_run) -> None:
    run = make_run()
    lease, _ = journal.acquire_lease("gpu02", run.run_id, "runner-a", 600)
    effect = journal.record_intent(lease, run.run_id, "deploy", "http.post", {}, mutating=True)
    journal.record_outcome(lease, run.run_id, effect.effect_id, {"status": 200})
    with pytest.raises(JournalError, match="already has an outcome"):
        journal.record_outcome(lease, run.run_id, effect.effect_id, {"status": 500})
    assert journal.effects(run.run_id)[0].outcome == {"status": 200}
    with pytest.raises(JournalError, match="no effect 7"):
        journal.record_outcome(lease, run.run_id, 7, {"status": 200})


def test_effect_ids_are_per_run(journal, clock, make_run) -> None:
    a = make_run()
    clock.advance(60)
    b = make_run()
    lease, _ = journal.acquire_lease("gpu02", a.run_id, "runner-a", 600)
    journal.record_intent(lease, a.run_id, "s", "k", {}, mutating=False)
    journal.record_intent(lease, a.run_id, "s", "k", {}, mutating=False)
    # The host lease fences writes to any run of that host.
    first_of_b = journal.record_intent(lease, b.run_id, "s", "k", {}, mutating=False)
    assert first_of_b.effect_id == 1
    assert len(journal.effects(a.run_id)) == 2


def test_resume_after_a_crash_sees_the_intent_without_outcome(store, clock, make_run) -> None:
    """Runner A dies between intent and outcome; a new process resumes the run."""
    a = store.open()
    run = make_run(a)
    lease_a, _ = a.acquire_lease("gpu02", run.run_id, "host1:pid100", 300)
    a.record_transition(lease_a, run.run_id, "INIT", "start", "DEPLOY")
    intent = a.record_intent(
        lease_a, run.run_id, "deploy", "http.post", {"url": "/deploy"}, mutating=True
    )
    a.close()  # crash: no outcome, no release

    clock.advance(301)
    b = store.open()
    lease_b, previous = b.acquire_lease("gpu02", run.run_id, "host1:pid200", 300)
    assert previous == lease_a
    assert lease_b.token == lease_a.token + 1
    assert b.get_run(run.run_id).state == "DEPLOY"
    assert b.open_effects(run.run_id) == [intent]

    # B reconciles (asks compose-manager what happened) and records it instead of re-posting.
    b.record_outcome(lease_b, run.run_id, intent.effect_id, {"reconciled": True, "status": 200})
    assert b.open_effects(run.run_id) == []
    b.record_transition(lease_b, run.run_id, "DEPLOY", "deployed", "VERIFY")
    assert b.get_run(run.run_id).state == "VERIFY"
