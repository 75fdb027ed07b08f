"""The last line of a ROLLED_BACK run: the target and its source, and what still runs the new file
with the runbook's reason (`rollback_keeps:`), or a plain "look at it" when the runbook gives none."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from orchestrator.engine.executor.rollback_summary import CONFIG_FILES, rollback_summary
from orchestrator.hosts.clients.errors import TransportError
from orchestrator.hosts.parsers.docker_ps import Container
from orchestrator.language.runbook import DEFAULT_RUNBOOK, load_runbook

RB = load_runbook(DEFAULT_RUNBOOK)
OLD = RB.deploys[0]


def _c(service: str, file: str) -> Container:
    return Container(id=service[:12], name=service, image="i", state="running", status="Up 1 hour", created_at="",
                     labels={CONFIG_FILES: f"/app/work/{file}"}, service=service)


def _rt(containers, fail=False):
    async def ps():
        if fail:
            raise TransportError("compose-manager", "connection refused")
        return containers

    previous = {s: {"tag": "v0.0.290", "file": OLD} for s in RB.previous_refs()}
    return SimpleNamespace(rb=RB, ctx=SimpleNamespace(previous=previous, previous_source="run X"), ps=ps)


def test_names_what_stays_on_the_new_file_and_why():
    line = asyncio.run(rollback_summary(_rt([_c("nginx", RB.file), _c("proxy-glm53", OLD), _c("dcgm-glm53", RB.file)])))
    assert line.startswith(f"Back to {OLD}@v0.0.290 (") and ", target from run X" in line
    assert f"nginx stays on {RB.file}, which is safe: the new definition only adds a watcher" in line
    assert f"dcgm-glm53 still runs {RB.file} and the runbook says nothing of it: look at it" in line
    assert "proxy-glm53 st" not in line  # on the previous file: not named as left behind


def test_an_unreadable_host_is_said_to_be_unknown():
    line = asyncio.run(rollback_summary(_rt([], fail=True)))
    assert f"what still runs {RB.file} is unknown" in line
