"""An explicit rollback target that exists but is wrong (a file at a tag compose-manager has) is
refused before anything is stopped: its dry run plans the removal of what serves, and the file
does not define what the rollback would start from it."""

from __future__ import annotations

import asyncio

import pytest

from tests.e2e.test_deployed_cm import _done_gpu02, _other_machine

pytestmark = pytest.mark.e2e

WRONG_FILE = "prod/GLM-5.3-Flash-SGL-TP4.yaml"
R1 = "model-sg-glm53-w4afp8-tp4-r1"


def test_an_existing_but_wrong_explicit_target_is_refused_before_anything_is_stopped(e2e_factory, tmp_path):
    from orchestrator.service.admission import new_rollback
    from orchestrator.util.user_errors import UserError

    e = e2e_factory()
    _done_gpu02(e)
    laptop, state = _other_machine(e, tmp_path, "laptop")
    try:
        before = len(e.fleet.calls)
        with pytest.raises(UserError) as exc:
            asyncio.run(new_rollback(laptop, "gpu02", "all", None, "v0.0.300", WRONG_FILE))
        assert type(exc.value) is UserError  # exit 2: the operator's target is wrong
        msg = str(exc.value)
        assert "\n" not in msg
        assert msg.startswith(f"rollback target {WRONG_FILE}@v0.0.300 is wrong: the file does not define {R1}, "
                              f"which the rollback starts from it"), msg
        assert msg.endswith("Check --to-tag/--to-file. Nothing was stopped")
        calls = e.fleet.calls[before:]
        # its one dry run planned the removal of both serving engines (as the deployed compose-manager does)
        dry = [c for c in calls if c.is_compose_up]
        assert [bool(c.body.get("dry_run")) for c in dry] == [True]
        assert not [c for c in calls if c.is_compose_down]
        assert laptop.journal.list_runs("gpu02") == []
    finally:
        laptop.close()
    host = e.fleet.host
    for svc in (R1, "model-sg-glm53-w4afp8-tp4-r2"):
        assert host.container(svc).state == "running", svc
    assert e.fleet.check_invariants() == []


def test_a_wrong_target_on_a_host_already_back_on_the_previous_file_is_refused_with_nothing_sent(e2e_factory, tmp_path):
    """The rollout's r2 failed and was rolled back: every service the rollback would start from the
    wrong file runs another definition, so no dry run can check it without planning a recreate."""
    from recording import RecordingProgress

    from orchestrator.language.runbook import DEFAULT_RUNBOOK
    from orchestrator.service.admission import new_rollback, new_rollout
    from orchestrator.service.runner import execute
    from orchestrator.util.user_errors import UserError

    e = e2e_factory("oom:r2")
    run, rb, table = new_rollout(e.session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK)
    assert asyncio.run(execute(e.session, run, rb, table, progress=RecordingProgress(), yes=True)).outcome == "ROLLED_BACK"
    laptop, _ = _other_machine(e, tmp_path, "laptop")
    try:
        before = len(e.fleet.calls)
        with pytest.raises(UserError) as exc:
            asyncio.run(new_rollback(laptop, "gpu02", "all", None, "v0.0.300", WRONG_FILE))
        assert str(exc.value).startswith(f"rollback target {WRONG_FILE}@v0.0.300 cannot be checked before anything is "
                                         f"stopped: every service the rollback starts from it"), exc.value
        assert not [c for c in e.fleet.calls[before:] if c.is_compose_up or c.is_compose_down]
        assert laptop.journal.list_runs("gpu02") == []
    finally:
        laptop.close()
