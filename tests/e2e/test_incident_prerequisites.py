"""The base tier's prerequisite (gpu02's long-context rollout DONE) is the newest gpu02 run that
changed the host, and what gpu02 itself says when this machine's journal cannot know (a rollback
from another machine)."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.language.runbook import DEFAULT_RUNBOOK
from orchestrator.service.requests import RolloutRequest
from orchestrator_sim import BASE_HOSTS, BASE_TARGET_TAG
from tests.e2e.test_deployed_cm import OLD_FILE, _done_gpu02, _other_machine

pytestmark = pytest.mark.e2e

RUNBOOK = "base-glm53-w4afp8"


def _base(host: str) -> RolloutRequest:
    return RolloutRequest(host=host, tag=BASE_TARGET_TAG, runbook=RUNBOOK, yes=True, soak="0", overrides=())


def test_a_mistyped_gpu02_rollout_that_changed_nothing_does_not_stop_the_fleet(e2e_factory):
    """gpu02 DONE; the fleet's gpu03 DONE; then a gpu02 rollout with a mistyped tag ends ABORTED
    having changed nothing: gpu04 still goes (its admission and its preflight gate zero)."""
    from recording import RecordingProgress

    from orchestrator.engine.fleet import run_fleet
    from orchestrator.service.admission import admit_rollout, new_rollout
    from orchestrator.service.runner import execute

    e = e2e_factory(hosts=("gpu02", *BASE_HOSTS))
    _done_gpu02(e)

    def one(host: str):
        adm = admit_rollout(e.session, _base(host))
        final = asyncio.run(execute(e.session, adm.run, adm.rb, adm.table, progress=RecordingProgress(), yes=True, soak=0.0))
        if host == "gpu03":
            run, rb, table = new_rollout(e.session, "gpu02", "v0.0.399", DEFAULT_RUNBOOK)  # no such tag
            typo = asyncio.run(execute(e.session, run, rb, table, progress=RecordingProgress(), yes=True))
            assert typo.outcome == "ABORTED" and "Nothing was changed" in typo.message, typo.message
        return final

    result = run_fleet(["gpu03", "gpu04"], one)
    assert result.outcome == "DONE", result.summary(BASE_TARGET_TAG, RUNBOOK)
    assert e.fleet.check_invariants() == []


def test_gpu02_rolled_back_from_another_machine_is_a_prerequisite_not_met(e2e_factory, tmp_path):
    from recording import RecordingProgress

    from orchestrator.service.admission import admit_rollout, new_rollback
    from orchestrator.service.runner import execute
    from orchestrator.util.user_errors import Refused

    e = e2e_factory(hosts=("gpu02", *BASE_HOSTS))
    _done_gpu02(e)
    laptop, _ = _other_machine(e, tmp_path, "laptop")
    try:
        run, rb, table = asyncio.run(new_rollback(laptop, "gpu02", "all", None, "v0.0.290", OLD_FILE))
        back = asyncio.run(execute(laptop, run, rb, table, progress=RecordingProgress(), yes=True))
    finally:
        laptop.close()
    assert back.outcome == "ROLLED_BACK", back.message
    # this machine's journal still says gpu02 DONE; gpu02 itself says it was rolled back
    before = len(e.fleet.calls)
    with pytest.raises(Refused) as exc:
        admit_rollout(e.session, _base("gpu03"))
    msg = str(exc.value)
    assert msg.startswith(f"prerequisite not met: gpu02: compose-manager on gpu02 has run {OLD_FILE}@v0.0.290"), msg
    assert "(rolled back from another machine?)" in msg and "--override-prerequisite gpu02" in msg
    assert e.session.journal.list_runs("gpu03") == []
    assert not [c for c in e.fleet.calls[before:] if c.is_compose_up or c.is_compose_down]
    # named by the operator, the override still lets the run start
    adm = admit_rollout(e.session, RolloutRequest(host="gpu03", tag=BASE_TARGET_TAG, runbook=RUNBOOK, yes=True,
                                                  soak="0", overrides=("gpu02",)))
    assert adm.run.host == "gpu03"
