"""The last line of a ROLLED_BACK run: the target and its source, and what still runs the new file
with the runbook's reason (`rollback_keeps:`), or a plain "look at it" when the runbook gives none."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from orchestrator.engine.executor.rollback_summary import rollback_summary
from orchestrator.hosts.clients.errors import TransportError
from orchestrator.hosts.parsers.action_log import Action
from orchestrator.hosts.parsers.docker_ps import Container
from orchestrator.hosts.ps_compare import CONFIG_FILES_LABEL
from orchestrator.language.runbook import DEFAULT_RUNBOOK, load_runbook

RB = load_runbook(DEFAULT_RUNBOOK)
OLD = RB.deploys[0]


def _c(service: str, file: str) -> Container:
    return Container(id=service[:12], name=service, image="i", state="running", status="Up 1 hour", created_at="",
                     labels={CONFIG_FILES_LABEL: f"/app/work/{file}"}, service=service)


def _up(tag, file, *services, sha=None):
    return Action(timestamp="T", action="compose_up", tag=tag, commit=None, file=file, file_sha256=sha, services=services)


def _rt(containers, fail=False, actions=(), previous_file=OLD, tag="v0.0.300", before=None):
    async def ps():
        if fail:
            raise TransportError("compose-manager", "connection refused")
        return containers

    async def action_log():
        return list(actions)

    previous = {s: {"tag": "v0.0.290", "file": previous_file} for s in RB.previous_refs()}
    return SimpleNamespace(rb=RB, run=SimpleNamespace(tag=tag), ctx=SimpleNamespace(previous=previous, previous_source="run X", before=before),
                           ps=ps, action_log=action_log)


def test_names_what_stays_on_the_new_file_and_why():
    line = asyncio.run(rollback_summary(_rt([_c("nginx", RB.file), _c("proxy-glm53", OLD), _c("dcgm-glm53", RB.file)])))
    assert line.startswith(f"Back to {OLD}@v0.0.290 (") and ", target from run X" in line
    assert f"nginx stays on {RB.file}, which is safe: the new definition only adds a watcher" in line
    assert f"dcgm-glm53 still runs {RB.file}@v0.0.300 and the runbook says nothing of it: look at it" in line
    assert "proxy-glm53 st" not in line  # on the previous file: not named as left behind


def test_an_unreadable_host_is_said_to_be_unknown():
    line = asyncio.run(rollback_summary(_rt([], fail=True)))
    assert f"what still runs {RB.file}@v0.0.300 is unknown" in line


def test_one_path_at_two_tags_names_only_what_runs_the_new_tag():
    """A canary's new and previous files are one path: what the rollback restored (its last up at
    the previous tag) and what the run never touched are not named; what runs the new tag is."""
    actions = [_up("v0.0.290", RB.file, sha="a"), _up("v0.0.300", RB.file, "dcgm-glm53", sha="b"),
               _up("v0.0.290", RB.file, "proxy-glm53", sha="a")]
    line = asyncio.run(rollback_summary(_rt([_c("nginx", RB.file), _c("proxy-glm53", RB.file), _c("dcgm-glm53", RB.file)],
                                            actions=actions, previous_file=RB.file)))
    assert f"dcgm-glm53 still runs {RB.file}@v0.0.300" in line
    assert "proxy-glm53 st" not in line  # restored: its last up was at the previous tag
    assert "nginx st" not in line  # never touched since the previous tag's whole-file up


def test_a_file_the_same_at_both_tags_differs_in_nothing():
    actions = [_up("v0.0.290", RB.file, sha="same"), _up("v0.0.300", RB.file, "dcgm-glm53", sha="same")]
    line = asyncio.run(rollback_summary(_rt([_c("dcgm-glm53", RB.file)], actions=actions, previous_file=RB.file)))
    assert "dcgm-glm53" not in line.split("Back to", 1)[1].split(")", 1)[1]


def test_a_sidecar_that_ran_when_the_run_started_and_runs_no_more_is_named():
    """A soak relay an operator left running, stopped by the rollback and not started again."""
    before = SimpleNamespace(ps={"glm53-soak-relay": {"id": "r", "state": "running", "status": "Up 3 hours"},
                                 "model-sg-glm53-fp8-tp4-r2": {"id": "e", "state": "running", "status": "Up 3 hours"},
                                 "nginx": {"id": "n", "state": "running", "status": "Up 3 hours"}})
    line = asyncio.run(rollback_summary(_rt([_c("nginx", OLD)], before=before)))
    assert "glm53-soak-relay ran when the run started and runs no more" in line
    assert "model-sg-glm53-fp8-tp4-r2 ran" not in line  # an engine: `host now` says what each replica runs
    assert "nginx ran" not in line
