"""What the deployed compose-manager taught us (issue 27), end to end on the simulator, judged on
the simulator's own record (its calls, its containers, its invariant checker).

- Inline `configs:` changes do not recreate (docker/compose#11900): the simulator behaves like
  the compose release the host reports, and the rollouts still reach DONE because the services
  whose only change is inline configs content are force-recreated, each alone, never an engine.
"""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.progress import RecordingProgress
from orchestrator.runbook import DEFAULT_RUNBOOK
from orchestrator_sim import BASE_TARGET_TAG

pytestmark = pytest.mark.e2e

RELAY = "glm53-soak-relay"
COLLECTOR = "otelcol-contrib"
NEW_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"
BASE_NEW_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8.yaml"


def _execute(e, run, rb, table, **kw):
    from orchestrator.runner import execute

    return asyncio.run(execute(e.session, run, rb, table, progress=RecordingProgress(), yes=True, **kw))


def _forced(fleet, host: str) -> list[tuple[list[str], bool]]:
    """(services, dry_run) of every compose/up that set force_recreate on `host`."""
    return [(list(c.body["services"]), bool(c.body.get("dry_run"))) for c in fleet.calls
            if c.host == host and c.is_compose_up and (c.body or {}).get("force_recreate")]


def test_the_simulated_host_ignores_config_only_changes_by_default(e2e_factory):
    e = e2e_factory()
    assert e.fleet.host.inline_configs_ignored  # the default: what the reported compose release does


def test_gpu02_rollout_is_done_where_config_only_changes_do_not_recreate(e2e_factory):
    from orchestrator.runner import new_rollout

    e = e2e_factory()
    relay_before = e.fleet.host.container(RELAY).id
    run, rb, table = new_rollout(e.session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK)
    final = _execute(e, run, rb, table)
    assert final.outcome == "DONE", final.message
    assert e.fleet.check_invariants() == []
    forced = _forced(e.fleet, "gpu02")
    # each forced request names one config-only service, and its up follows its dry run
    assert {tuple(s) for s, _ in forced} == {(RELAY,), (COLLECTOR,)}
    assert all(not any(s.startswith("model-sg-") for s in services) for services, _ in forced)
    assert [d for s, d in forced if s == [RELAY]] == [True, False, True, False]  # r2's and r1's relay
    assert [d for s, d in forced if s == [COLLECTOR]] == [True, False]
    collector = e.fleet.host.container(COLLECTOR)
    assert (collector.tag, collector.file) == ("v0.0.300", NEW_FILE)  # the new config took
    assert e.fleet.host.container(RELAY) is None or e.fleet.host.container(RELAY).id != relay_before


def test_gpu03_rollout_is_done_where_config_only_changes_do_not_recreate(e2e_factory):
    from orchestrator.fleet import journal_overrides
    from orchestrator.runner import new_rollout

    e = e2e_factory(hosts=("gpu03", "gpu04", "gpu23"))
    run, rb, table = new_rollout(e.session, "gpu03", BASE_TARGET_TAG, "base-glm53-w4afp8")
    journal_overrides(e.session.journal, run, ("gpu02",), "test")
    final = _execute(e, run, rb, table, soak=0.0)
    assert final.outcome == "DONE", final.message
    assert e.fleet.check_invariants() == []
    forced = _forced(e.fleet, "gpu03")
    assert {tuple(s) for s, _ in forced} == {(RELAY,), (COLLECTOR,)}
    assert [d for s, d in forced if s == [COLLECTOR]] == [True, False]
    collector = e.fleet.hosts["gpu03"].container(COLLECTOR)
    assert (collector.tag, collector.file) == (BASE_TARGET_TAG, BASE_NEW_FILE)
