"""Reading a rollback target from compose-manager's history when no journal holds the rollout
(orchestrator/service/incident.py): the new file's tag, and the suggestion the refusal prints."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from orchestrator.engine.rules.targets import EXPLICIT
from orchestrator.hosts.parsers.action_log import Action
from orchestrator.language.runbook import DEFAULT_RUNBOOK, load_runbook
from orchestrator.service.incident import no_journal_message, read_history

RB = load_runbook(DEFAULT_RUNBOOK)
NEW, OLD = RB.file, RB.deploys[0]
SESSION = SimpleNamespace(settings=SimpleNamespace(database_url="", state_dir=Path("/state")))


def command(h):
    """The command the refusal gives."""
    return no_journal_message(SESSION, "gpu02", RB, h, "no rollout").split("`")[1]


def up(tag, file, *services, at="2026-11-01T00:00:00.000000000+00:00"):
    return Action(timestamp=at, action="compose_up", tag=tag, commit=None, file=file, file_sha256=None, services=services)


def test_after_a_whole_rollout_the_suggestion_is_the_last_other_file_before_the_new_one():
    actions = [up("v0.0.280", OLD, "nginx"), up("v0.0.290", OLD, "model-sg-glm53-fp8-tp4-r2", at="T290"),
               up("v0.0.290", OLD, "glm53-soak-relay", at="T290b"),
               up("v0.0.300", NEW, "model-sg-glm53-w4afp8-tp4-r2"), up("v0.0.300", NEW, "glm53-soak-relay"),
               up("v0.0.300", NEW, "nginx")]
    h = read_history(actions, ("v0.0.300", NEW), RB)
    assert (h.new_tag, h.suggested, h.suggested_at) == ("v0.0.300", ("v0.0.290", OLD), "T290b")
    assert command(h) == f"orchestrate rollback gpu02 --runbook {RB.name} --to-tag v0.0.290 --to-file {OLD}"


def test_the_new_tag_comes_from_the_action_log_when_the_last_success_is_another_file():
    actions = [up("v0.0.290", OLD, "x"), up("v0.0.300", NEW, "y"), up("v0.0.290", OLD, "z")]
    h = read_history(actions, ("v0.0.290", OLD), RB)
    assert h.new_tag == "v0.0.300" and h.suggested == ("v0.0.290", OLD)


def test_a_host_that_never_ran_the_new_file_has_no_new_tag():
    h = read_history([up("v0.0.290", OLD, "x")], ("v0.0.290", OLD), RB)
    assert h.new_tag is None


def test_a_file_outside_deploys_is_not_suggested():
    h = read_history([up("v0.0.100", "prod/Other.yaml", "x"), up("v0.0.300", NEW, "y")], None, RB)
    assert h.suggested is None and command(h).endswith("--to-tag TAG --to-file FILE")
    assert "explicit" in EXPLICIT


# -- a wrong explicit target, judged from its dry run (targets.wrong_target) ---------------------

def _explicit(tag, file):
    """An explicit target maps every previous reference to one (tag, file)."""
    return {svc: {"tag": tag, "file": file, "commit": ""} for svc in RB.previous_refs()}


def test_a_target_whose_file_does_not_define_what_the_rollback_starts_from_it_is_wrong():
    from orchestrator.engine.rules.targets import wrong_target

    target = ("v0.0.300", "prod/GLM-5.3-Flash-SGL-TP4.yaml")
    msg = wrong_target(RB, RB.rollback_replicas("all"), _explicit(*target), target,
                       {"model-sg-glm53-w4afp8-tp4-r1", "model-sg-glm53-w4afp8-tp4-r2"})
    assert msg is not None and "does not define model-sg-glm53-w4afp8-tp4-r1, which the rollback starts from it" in msg
    assert "model-sg-glm53-w4afp8-tp4-r2" not in msg  # the rollback stops the new r2 itself before it goes back


def test_a_target_that_removes_a_running_service_the_rollback_never_stops_is_wrong():
    from orchestrator.engine.rules.targets import wrong_target

    target = ("v0.0.290", OLD)
    msg = wrong_target(RB, RB.rollback_replicas("all"), _explicit(*target), target, {"some-other-server"})
    assert msg is not None and "plans to remove some-other-server, running, which the rollback does not stop" in msg


def test_the_right_target_removing_only_what_the_rollback_stops_first_is_not_wrong():
    from orchestrator.engine.rules.targets import wrong_target

    target = ("v0.0.290", OLD)
    assert wrong_target(RB, RB.rollback_replicas("all"), _explicit(*target), target, {"model-sg-glm53-w4afp8-tp4-r2"}) is None
