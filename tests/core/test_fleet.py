"""Fleet runs (orchestrator/engine/fleet.py): the order, the stop at the first host that is not DONE,
the prerequisite refusal and its override by name, the user errors.

Mutation list (each rule was disabled in the source, the test run and seen failing):
- run_fleet, `if final.outcome != Outcome.DONE: break` removed -> test_the_fleet_stops_at_the
  _first_host_that_is_not_done fails (gpu23 runs);
- run_fleet, the `except UserError` branch removed -> test_a_refused_host_stops_the_fleet fails;
- refuse_unmet_prerequisites, `if problems:` made False -> test_a_fleet_is_refused_while_the
  _prerequisite_is_missing fails;
- parse_hosts, the `repeated` refusal removed -> test_hosts_are_parsed_in_order_and_checked fails.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.engine.fleet import (
    FleetResult,
    journal_overrides,
    parse_hosts,
    refuse_unmet_prerequisites,
    run_fleet,
    runbook_for,
)
from orchestrator.journal.sqlite import SqliteJournal
from orchestrator.language.runbook import load_runbook
from orchestrator.util.user_errors import Refused, UserError

BASE = load_runbook("base-glm53-w4afp8")
GPU02_RB = "gpu02-glm53-w4afp8-long-context"


def test_hosts_are_parsed_in_order_and_checked():
    assert parse_hosts("gpu03, gpu04,gpu23") == ["gpu03", "gpu04", "gpu23"]
    for bad in ("", "gpu03,,gpu04", "gpu03,gpu04,gpu03", " , "):
        with pytest.raises(UserError):
            parse_hosts(bad)


def test_the_runbook_is_the_shipped_one_that_names_every_host():
    assert runbook_for(["gpu03", "gpu23"], None).name == "base-glm53-w4afp8"
    with pytest.raises(UserError, match="--runbook"):
        runbook_for(["gpu02", "gpu03"], None)  # no shipped runbook names both
    with pytest.raises(UserError, match="not gpu02"):
        runbook_for(["gpu02", "gpu03"], "base-glm53-w4afp8")


class _Run:
    def __init__(self, host: str, outcome: str) -> None:
        self.host, self.outcome, self.run_id, self.message = host, outcome, f"{host}-run", f"{host} ended {outcome}"


def test_every_host_done_is_a_done_fleet():
    ran: list[str] = []
    result = run_fleet(["gpu03", "gpu04", "gpu23"], lambda h: ran.append(h) or _Run(h, "DONE"))
    assert ran == ["gpu03", "gpu04", "gpu23"]
    assert result.outcome == "DONE" and result.not_started == []
    assert result.summary("v0.0.310", "base-glm53-w4afp8").startswith("fleet DONE: gpu03, gpu04, gpu23")


def test_the_fleet_stops_at_the_first_host_that_is_not_done():
    ran: list[str] = []
    outcomes = {"gpu03": "DONE", "gpu04": "ROLLED_BACK", "gpu23": "DONE"}
    result = run_fleet(["gpu03", "gpu04", "gpu23"], lambda h: ran.append(h) or _Run(h, outcomes[h]))
    assert ran == ["gpu03", "gpu04"]
    assert result.outcome == "ROLLED_BACK" and result.stopped_at == "gpu04" and result.not_started == ["gpu23"]
    text = result.summary("v0.0.310", "base-glm53-w4afp8")
    assert "fleet stopped at gpu04" in text and "not started: gpu23" in text and "DONE: gpu03" in text
    assert "rollout --hosts gpu03,gpu04,gpu23 --tag v0.0.310" in text


def test_a_refused_host_stops_the_fleet():
    def one(h: str) -> _Run:
        if h == "gpu04":
            raise Refused("gpu04 is leased by run x")
        return _Run(h, "DONE")

    result = run_fleet(["gpu03", "gpu04", "gpu23"], one)
    assert result.outcome == "ABORTED" and result.stopped_at == "gpu04" and result.not_started == ["gpu23"]
    assert "refused before it started: gpu04 is leased" in result.summary("v1", "rb")


def _gpu02_done(journal: SqliteJournal, ended_ago: timedelta = timedelta(0)) -> None:
    run = journal.create_run(host="gpu02", runbook=GPU02_RB, tag="v0.0.300", kind="rollout", state="x", context={})
    lease, _ = journal.acquire_lease("gpu02", run.run_id, "t", 60)
    journal.record_transition(lease, run.run_id, "x", "ok", "DONE", context={}, terminal=True, outcome="DONE", message="done")


def test_a_fleet_is_refused_while_the_prerequisite_is_missing():
    journal = SqliteJournal(":memory:")
    with pytest.raises(Refused, match="gpu02: no gpu02-glm53-w4afp8-long-context rollout in the journal.*--override-prerequisite gpu02"):
        refuse_unmet_prerequisites(BASE, journal, [])
    refuse_unmet_prerequisites(BASE, journal, ["gpu02"])  # overridden by name
    with pytest.raises(UserError, match="gpu99: not a prerequisite"):
        refuse_unmet_prerequisites(BASE, journal, ["gpu99"])  # a typo never passes
    _gpu02_done(journal)
    refuse_unmet_prerequisites(BASE, journal, [])


def test_a_prerequisite_that_has_not_soaked_long_enough_is_refused():
    journal = SqliteJournal(":memory:")
    _gpu02_done(journal)
    rb = BASE.model_copy(update={"prerequisites": [replace_soak(p, 3600) for p in BASE.prerequisites]})
    with pytest.raises(Refused, match="less than the 1h soak"):
        refuse_unmet_prerequisites(rb, journal, [])
    refuse_unmet_prerequisites(rb, journal, [], now=datetime.now(UTC) + timedelta(hours=2))


def replace_soak(p, seconds: float):
    return p.model_copy(update={"soaked": seconds})


def test_an_override_is_journaled_as_a_named_approval():
    journal = SqliteJournal(":memory:")
    run = journal.create_run(host="gpu03", runbook=BASE.name, tag="v1", kind="rollout", state="x", context={})
    journal_overrides(journal, run, ["gpu02"], "alice@laptop")
    assert journal.approvals(run.run_id) == {"prerequisite:gpu02"}


def test_fleet_result_with_nothing_run_is_not_done():
    assert FleetResult(["gpu03"]).outcome != "DONE"


def test_plan_renders_the_fleet_order_and_its_rules(monkeypatch):
    """`plan --hosts` (offline): the host order, the rules between hosts, then one host's steps."""
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    from orchestrator.cli import app

    monkeypatch.setenv("ORCHESTRATOR_INVENTORY", str(Path(__file__).resolve().parents[2] / "config" / "hosts.yaml"))
    r = CliRunner().invoke(app, ["plan", "--hosts", "gpu04,gpu03,gpu23", "--tag", "v0.0.310"])
    assert r.exit_code == 0, r.output
    head = r.output.split("== Preflight")[0]
    assert "fleet gpu04 -> gpu03 -> gpu23" in head and "runbook base-glm53-w4afp8" in head
    assert "stops at the first host that does not end DONE" in head
    assert "--override-prerequisite gpu02" in head and "capacity guard" in head
    assert "shown for gpu04" in head
    r = CliRunner().invoke(app, ["plan", "--hosts", "gpu03,gpu04", "--tag", "v0.0.310", "--format", "json"])
    doc = json.loads(r.output)
    assert doc["fleet"] == ["gpu03", "gpu04"] and doc["host"] == "gpu03" and doc["fleet_rules"]


def test_a_nothing_to_do_done_proves_no_soak():
    """gpu02 re-run on a host already at the target ends DONE with nothing to do: that run is
    passed over; the run before it decides (here: none -> not met; a soaked DONE -> met)."""
    journal = SqliteJournal(":memory:")
    run = journal.create_run(host="gpu02", runbook=GPU02_RB, tag="v0.0.300", kind="rollout", state="preflight.host-state",
                             context={})
    lease, _ = journal.acquire_lease("gpu02", run.run_id, "t", 60)
    journal.record_transition(lease, run.run_id, "preflight.host-state", "skip", "DONE", context={}, terminal=True,
                              outcome="DONE", message="nothing to do")
    with pytest.raises(Refused, match="no gpu02-glm53-w4afp8-long-context rollout"):
        refuse_unmet_prerequisites(BASE, journal, [])


def test_an_override_of_a_prerequisite_that_holds_is_not_journaled():
    journal = SqliteJournal(":memory:")
    run = journal.create_run(host="gpu03", runbook=BASE.name, tag="v1", kind="rollout", state="x", context={})
    assert journal_overrides(journal, run, ["gpu02"], "alice", BASE) == ["gpu02"]  # unmet: journaled
    _gpu02_done(journal)
    run2 = journal.create_run(host="gpu04", runbook=BASE.name, tag="v1", kind="rollout", state="x", context={})
    assert journal_overrides(journal, run2, ["gpu02"], "alice", BASE) == []
    assert journal.approvals(run2.run_id) == set()


def test_an_interrupted_host_stops_the_fleet_and_names_the_rest():
    from orchestrator.engine.fleet import Interrupted

    def one(h: str) -> _Run:
        if h == "gpu04":
            raise Interrupted(h)
        return _Run(h, "DONE")

    result = run_fleet(["gpu03", "gpu04", "gpu23"], one)
    assert result.interrupted == "gpu04" and result.stopped_at == "gpu04" and result.not_started == ["gpu23"]
    assert result.outcome != "DONE" and "fleet interrupted at gpu04" in result.summary("v1", "rb")


def test_a_switch_failure_is_retried_from_the_capacity_guard():
    """The base tier's switch assumes a drained host: `resume --retry` restarts at the capacity
    guard (retry_from: capacity), which checks the other hosts again and drains again."""
    import copy

    import yaml

    from orchestrator.language.machine import compile_rollout
    from orchestrator.language.runbook import RUNBOOK_DIR, parse_runbook

    t = compile_rollout(BASE)
    assert t.retry_start("switch") == "capacity.others-serve"
    assert t.retry_start("drain") == t.phase_start("drain") == "drain.drain"
    raw = yaml.safe_load((RUNBOOK_DIR / "base-glm53-w4afp8.yaml").read_text())
    later = copy.deepcopy(raw)
    next(p for p in later["phases"] if p["name"] == "drain")["retry_from"] = "switch"
    with pytest.raises(UserError, match="retry_from: 'switch' is not an earlier phase"):
        parse_runbook(later, source="t.yaml")


def test_retry_run_starts_the_child_where_the_table_says():
    """admission.retry_run uses Table.retry_start (with phase_start there, this test fails)."""
    from types import SimpleNamespace

    from orchestrator.service.admission import retry_run

    journal = SqliteJournal(":memory:")
    run = journal.create_run(host="gpu03", runbook=BASE.name, tag="v0.0.310", kind="rollout", state="switch.rollback.rejoined-old",
                             context={"failure": {"state": "switch.rejoined", "event": "fail", "reason": "no rejoin"}})
    lease, _ = journal.acquire_lease("gpu03", run.run_id, "t", 60)
    journal.record_transition(lease, run.run_id, "switch.rollback.rejoined-old", "fail", "HALTED",
                              context={"failure": {"state": "switch.rejoined", "event": "fail", "reason": "no rejoin"}},
                              terminal=True, outcome="HALTED", message="halted")
    journal.release(lease)
    session = SimpleNamespace(journal=journal, settings=SimpleNamespace(lease_ttl=60), admitted={})
    child, _, _ = retry_run(session, journal.get_run(run.run_id))
    assert child.state == "capacity.others-serve" and child.parent_run_id == run.run_id


def test_the_prerequisite_host_has_the_last_word_on_a_journaled_done():
    """A DONE in this journal holds only while gpu02 itself agrees: no up of another file since
    the run's last up of its file at its tag, and its last successful up on that file."""
    from orchestrator.engine.rules.prerequisites import HostWord
    from orchestrator.hosts.parsers.action_log import Action

    new, old = load_runbook(GPU02_RB).file, "prod/Old.yaml"

    def up(tag, file):
        return Action(timestamp="T", action="compose_up", tag=tag, commit=None, file=file, file_sha256=None, services=("x",))

    journal = SqliteJournal(":memory:")
    _gpu02_done(journal)
    agrees = HostWord([up("v0.0.290", old), up("v0.0.300", new)], ("v0.0.300", new), new)
    refuse_unmet_prerequisites(BASE, journal, [], words={"gpu02": agrees})
    rolled_back = HostWord([up("v0.0.300", new), up("v0.0.290", old)], ("v0.0.290", old), new)
    with pytest.raises(Refused, match=f"compose-manager on gpu02 has run {old}@v0.0.290 .* since"):
        refuse_unmet_prerequisites(BASE, journal, [], words={"gpu02": rolled_back})
    refuse_unmet_prerequisites(BASE, journal, ["gpu02"], words={"gpu02": rolled_back})  # overridden by name
    never = HostWord([up("v0.0.290", old)], ("v0.0.290", old), new)
    with pytest.raises(Refused, match=f"holds no up of {new}@v0.0.300"):
        refuse_unmet_prerequisites(BASE, journal, [], words={"gpu02": never})
    failed_since = HostWord([up("v0.0.300", new)], ("v0.0.290", old), new)
    with pytest.raises(Refused, match=f"last successful up on gpu02 is {old}@v0.0.290"):
        refuse_unmet_prerequisites(BASE, journal, [], words={"gpu02": failed_since})
