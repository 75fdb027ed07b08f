"""What a halted rollback names as the command that works next: the same rollback again."""

from orchestrator.engine.context import RunContext
from orchestrator.engine.executor.loop import rollback_again
from orchestrator.language.runbook import load_runbook

RB = load_runbook("gpu02-glm53-w4afp8-long-context")
TARGET = {"tag": "v0.0.290", "file": "prod/GLM-5.3-Flash-SGL-TP4-LongContext.yaml", "commit": ""}


def _ctx(source: str, replicas: list[str]) -> RunContext:
    return RunContext(previous={svc: dict(TARGET) for svc in RB.previous_refs()}, replicas=replicas,
                      previous_source=source)


def test_an_explicit_target_is_repeated_whole():
    cmd = rollback_again("gpu02", RB, _ctx("the operator's explicit --to-tag/--to-file (no journaled rollout)",
                                           RB.rollback_replicas("all")))
    assert cmd == (f"orchestrate rollback gpu02 --runbook {RB.name} --to-tag v0.0.290 "
                   f"--to-file prod/GLM-5.3-Flash-SGL-TP4-LongContext.yaml")


def test_an_explicit_target_for_one_replica_keeps_the_replica():
    cmd = rollback_again("gpu02", RB, _ctx("--to-tag/--to-file", ["r2"]))
    assert " --replica r2 --to-tag v0.0.290 " in cmd


def test_a_journaled_target_is_the_plain_command():
    assert rollback_again("gpu02", RB, _ctx("run gpu02-abc", RB.rollback_replicas("all"))) == "orchestrate rollback gpu02"
