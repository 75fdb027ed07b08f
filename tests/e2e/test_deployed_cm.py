"""What the deployed compose-manager taught us (issue 27), end to end on the simulator, judged on
the simulator's own record (its calls, its containers, its invariant checker).

- Inline `configs:` changes do not recreate (docker/compose#11900): the simulator behaves like
  the compose release the host reports, and the rollouts still reach DONE because the services
  whose only change is inline configs content are force-recreated, each alone, never an engine.
"""

from __future__ import annotations

import asyncio

import pytest
from recording import RecordingProgress

from orchestrator.language.runbook import DEFAULT_RUNBOOK
from orchestrator_sim import BASE_TARGET_TAG

pytestmark = pytest.mark.e2e

RELAY = "glm53-soak-relay"
COLLECTOR = "otelcol-contrib"
NEW_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"
BASE_NEW_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8.yaml"


def _execute(e, run, rb, table, **kw):
    from orchestrator.service.runner import execute

    return asyncio.run(execute(e.session, run, rb, table, progress=RecordingProgress(), yes=True, **kw))


def _forced(fleet, host: str) -> list[tuple[list[str], bool]]:
    """(services, dry_run) of every compose/up that set force_recreate on `host`."""
    return [(list(c.body["services"]), bool(c.body.get("dry_run"))) for c in fleet.calls
            if c.host == host and c.is_compose_up and (c.body or {}).get("force_recreate")]


def test_the_simulated_host_ignores_config_only_changes_by_default(e2e_factory):
    e = e2e_factory()
    assert e.fleet.host.inline_configs_ignored  # the default: what the reported compose release does


def test_gpu02_rollout_is_done_where_config_only_changes_do_not_recreate(e2e_factory):
    from orchestrator.service.admission import new_rollout

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


def test_a_forced_recreate_the_host_ignores_is_remedied_by_a_scoped_down_not_rolled_back(e2e_factory):
    """compose-manager drops force_recreate: the relay's and the collector's forced dry runs plan
    them `Running` (the new config would not take). Each dry run's own gate stops exactly that
    service (never an engine) and plans again; the rollout is DONE with the new configs."""
    from orchestrator.service.admission import new_rollout

    e = e2e_factory("force-recreate-ignored")
    run, rb, table = new_rollout(e.session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK)
    final = _execute(e, run, rb, table)
    assert final.outcome == "DONE", final.message
    assert e.fleet.check_invariants() == []
    downs = [c.body["services"] for c in e.fleet.calls if c.is_compose_down]
    assert downs.count([COLLECTOR]) == 1 and [RELAY] in downs
    assert not [d for d in downs if any(s.startswith("model-sg-") for s in d) and d not in (
        ["model-sg-glm53-fp8-tp4-r2"], ["model-sg-glm53-w4afp8-tp4-r1"])]  # only the runbook's own engine stops
    collector = e.fleet.host.container(COLLECTOR)
    assert (collector.tag, collector.file) == ("v0.0.300", NEW_FILE)


def test_gpu03_rollout_is_done_where_config_only_changes_do_not_recreate(e2e_factory):
    from orchestrator.engine.fleet import journal_overrides
    from orchestrator.service.admission import new_rollout

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


# -- incident rollback from a machine without the rollout's journal ----------------------------

OLD_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml"
ENGINES = ("model-sg-glm53-fp8-tp4-r2", "model-sg-glm53-w4afp8-tp4-r1", "model-sg-glm53-w4afp8-tp4-r2")


def _other_machine(e, tmp_path, name: str, *, shared: bool = False):
    """A second orchestrator on the same simulated fleet: its own empty journal (another
    machine), or `shared` the rollout's journal (team mode's shared database)."""
    from orchestrator.hosts.clients.retry import RetryPolicy
    from orchestrator.service.demo import demo_settings
    from orchestrator.service.session import Session
    from orchestrator.util.clock import ScaledClock
    from tests.e2e.conftest import SPEED

    state = e.state_dir if shared else tmp_path / name
    state.mkdir(exist_ok=True)
    session = Session.open(demo_settings(e.fleet, state), clock=ScaledClock(SPEED),
                           retry=RetryPolicy(deadline_s=900, busy_wait_s=5))
    return session, state


def _done_gpu02(e):
    from orchestrator.service.admission import new_rollout

    run, rb, table = new_rollout(e.session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK)
    final = _execute(e, run, rb, table)
    assert final.outcome == "DONE", final.message
    # compose-manager's success record no longer holds the previous deploy
    version = e.fleet.host.version()["projects"]["work"]
    assert version["current"]["tag"] == version["previous"]["tag"] == "v0.0.300"


def test_rollback_from_an_empty_journal_names_the_journal_and_the_command(e2e_factory, tmp_path):
    from orchestrator.service.admission import new_rollback
    from orchestrator.util.user_errors import Refused

    e = e2e_factory()
    _done_gpu02(e)
    laptop, state = _other_machine(e, tmp_path, "laptop")
    try:
        before = len(e.fleet.calls)
        with pytest.raises(Refused) as exc:
            asyncio.run(new_rollback(laptop, "gpu02", "all", None, None, None))
        msg = str(exc.value)
        assert f"this machine's journal {state / 'journal.sqlite3'} holds no rollout of gpu02" in msg
        assert "ORCHESTRATOR_DATABASE_URL" in msg
        assert (f"`orchestrate rollback gpu02 --runbook {DEFAULT_RUNBOOK} --to-tag v0.0.290 --to-file {OLD_FILE}`"
                in msg)
        assert "\n" not in msg
        # read-only: nothing but reads were sent
        assert not [c for c in e.fleet.calls[before:] if c.is_compose_up or c.is_compose_down]
    finally:
        laptop.close()


def test_rollback_with_an_explicit_target_from_an_empty_journal_is_rolled_back(e2e_factory, tmp_path):
    from orchestrator.service.admission import new_rollback
    from orchestrator.service.runner import execute

    e = e2e_factory()
    _done_gpu02(e)
    laptop, _ = _other_machine(e, tmp_path, "laptop")
    try:
        before = len(e.fleet.calls)
        run, rb, table = asyncio.run(new_rollback(laptop, "gpu02", "all", None, "v0.0.290", OLD_FILE))
        final = asyncio.run(execute(laptop, run, rb, table, progress=RecordingProgress(), yes=True))
    finally:
        laptop.close()
    assert final.outcome == "ROLLED_BACK", final.message
    # the last line says it was an explicit target, and what stays on the new file and why
    assert f"Back to {OLD_FILE}@v0.0.290" in final.message
    assert "target from the operator's explicit --to-tag/--to-file (no journaled rollout)" in final.message
    assert f"nginx stays on {NEW_FILE}, which is safe: the new definition only adds a watcher" in final.message
    calls = e.fleet.calls[before:]
    # the target was dry-run-checked before the first stop
    first_down = next(i for i, c in enumerate(calls) if c.is_compose_down)
    assert any(c.is_compose_up and c.body.get("dry_run") and c.body["tag"] == "v0.0.290" and c.body["file"] == OLD_FILE
               for c in calls[:first_down])
    # the runbook's safe order: the new r2 stopped first, and only while r1 served
    downs = [c.body["services"] for c in calls if c.is_compose_down]
    assert downs.index(["model-sg-glm53-w4afp8-tp4-r2"]) < downs.index(["model-sg-glm53-w4afp8-tp4-r1"])
    assert e.fleet.check_invariants() == []
    host = e.fleet.host
    for svc in ("model-sg-glm53-fp8-tp4-r2", "model-sg-glm53-w4afp8-tp4-r1"):
        c = host.container(svc)
        assert c is not None and c.state == "running" and (c.tag, c.file) == ("v0.0.290", OLD_FILE), svc
    assert host.container("model-sg-glm53-w4afp8-tp4-r2") is None or host.container("model-sg-glm53-w4afp8-tp4-r2").state != "running"


def test_a_machine_on_the_rollouts_shared_journal_rolls_back_with_no_flags(e2e_factory, tmp_path):
    """Team mode: the rollout journaled its before-state at preflight; another machine reading the
    same journal finds the targets without --to-tag/--to-file."""
    from orchestrator.engine.executor import RunContext
    from orchestrator.service.admission import new_rollback
    from orchestrator.service.refusals import last_changing_rollout
    from orchestrator.service.runner import execute

    e = e2e_factory()
    _done_gpu02(e)
    other, _ = _other_machine(e, tmp_path, "", shared=True)
    try:
        last = last_changing_rollout(other, "gpu02")
        assert last is not None
        prev = RunContext.from_json(last.context).previous
        assert prev["model-sg-glm53-fp8-tp4-r2"]["tag"] == "v0.0.290" and prev["proxy-glm53"]["file"] == OLD_FILE
        run, rb, table = asyncio.run(new_rollback(other, "gpu02", "all", None, None, None))
        final = asyncio.run(execute(other, run, rb, table, progress=RecordingProgress(), yes=True))
    finally:
        other.close()
    assert final.outcome == "ROLLED_BACK", final.message
    assert e.fleet.check_invariants() == []


def test_an_explicit_target_on_a_host_that_never_ran_the_new_file_is_refused_with_nothing_sent(e2e_factory):
    from orchestrator.service.admission import new_rollback
    from orchestrator.util.user_errors import Refused

    e = e2e_factory()
    with pytest.raises(Refused, match=f"compose-manager on gpu02 has no up of {NEW_FILE} in its action log"):
        asyncio.run(new_rollback(e.session, "gpu02", "all", None, "v0.0.290", OLD_FILE))
    assert not [c for c in e.fleet.calls if c.is_compose_up or c.is_compose_down]


def test_a_base_host_rolls_back_from_an_empty_journal_with_an_explicit_target(e2e_factory, tmp_path):
    """gpu03 DONE on one machine; from another (no journal) `rollback gpu03 --to-tag --to-file`:
    the base runbook is the one written for gpu03, the host drained first, back on the canonical
    file with its collector config."""
    from orchestrator.engine.fleet import journal_overrides
    from orchestrator.service.admission import new_rollback, new_rollout
    from orchestrator.service.runner import execute

    canonical = "prod/GLM-5.3-Flash-SGL-TP4.yaml"
    e = e2e_factory(hosts=("gpu03", "gpu04", "gpu23"))
    run, rb, table = new_rollout(e.session, "gpu03", BASE_TARGET_TAG, "base-glm53-w4afp8")
    journal_overrides(e.session.journal, run, ("gpu02",), "test")
    assert _execute(e, run, rb, table, soak=0.0).outcome == "DONE"
    laptop, _ = _other_machine(e, tmp_path, "laptop")
    try:
        run, rb, table = asyncio.run(new_rollback(laptop, "gpu03", "all", None, "v0.0.300", canonical))
        assert rb.name == "base-glm53-w4afp8"
        final = asyncio.run(execute(laptop, run, rb, table, progress=RecordingProgress(), yes=True))
    finally:
        laptop.close()
    assert final.outcome == "ROLLED_BACK", final.message
    assert "target from the operator's explicit --to-tag/--to-file" in final.message
    assert e.fleet.check_invariants() == []
    host = e.fleet.hosts["gpu03"]
    for svc in ("model-sg-glm53-fp8-tp4-r1", "model-sg-glm53-fp8-tp4-r2", COLLECTOR):
        c = host.container(svc)
        assert c is not None and c.state == "running" and (c.tag, c.file) == ("v0.0.300", canonical), svc
