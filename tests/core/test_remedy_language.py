"""The `remedy:` construct (runbook.Remedy): what the loader accepts and refuses, and the edges and
cap the table compiles from it (machine._chain). The executor's side is tests/executor/test_remedy_gate.py.

Mutation list (each guard deleted in the source, this module run and seen failing, the source restored):
- runbook.py:Runbook._check_remedy, each refusal -> the matching
  test_loader_refuses_an_unsafe_remedy_naming_the_field[...] case fails (the runbook loads);
- runbook.py:Runbook._check_remedy, `_check_sequence(where, rem.steps)` removed -> the `up without dry
  run` case fails;
- machine.py:_chain, `b.remedy_caps[ids[i]] = s.remedy.max` removed -> test_the_cap_lives_in_the_table fails;
- machine.py:_chain, `after=ids[i]` of the remedy chain -> `after=after` ->
  test_the_remedy_chain_goes_back_to_its_gate fails.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from orchestrator.language.machine import HALTED, Event, Machine, compile_rollout
from orchestrator.language.runbook import RUNBOOK_DIR, load_runbook, parse_runbook
from orchestrator.util.user_errors import UserError

RAW = yaml.safe_load((RUNBOOK_DIR / "base-glm53-w4afp8.yaml").read_text())
R1 = "model-sg-glm53-w4afp8-tp4-r1"
GATE = "switch.cold-start-r1"


def _switch(d: dict) -> dict:
    return next(p for p in d["phases"] if p["name"] == "switch")


def _step(d: dict, sid: str) -> dict:
    return next(s for s in _switch(d)["steps"] if s["id"] == sid)


def _remedy(d: dict) -> dict:
    return _step(d, "cold-start-r1")["remedy"]


def _mutated(fn):
    data = copy.deepcopy(RAW)
    fn(data)
    return data


def test_the_base_tier_runbook_names_a_remedy_on_both_cold_start_gates():
    rb = load_runbook("base-glm53-w4afp8")
    steps = {s.id: s for s in rb.phase("switch").steps}
    for me, sibling in (("r1", "r2"), ("r2", "r1")):
        rem = steps[f"cold-start-{me}"].remedy
        assert rem is not None and rem.marker == "dist_store_error" and rem.max == 1
        assert [s.kind for s in rem.steps] == ["down", "logs", "dry_run", "up"]
        assert rem.steps[1].logs.service.endswith(sibling)  # the sibling serves before the failed engine starts again
        compose = [rem.steps[0], *rem.steps[2:]]
        assert all(s.compose.services == [f"model-sg-glm53-w4afp8-tp4-{me}"] for s in compose)
        assert all(s.compose.file == "new" for s in compose)
    # remedy lists are the runbook's lists too (previous refs, one-shots, per-step rules)
    assert any(s.id == "stop-r1" for steps in rb.step_lists() for s in steps)


def test_max_defaults_to_one():
    rb = parse_runbook(_mutated(lambda d: _remedy(d).pop("max")))
    assert next(s for s in rb.phase("switch").steps if s.id == "cold-start-r1").remedy.max == 1


def _set(path_fn, key, value):
    return lambda d: path_fn(d).__setitem__(key, value)


@pytest.mark.parametrize(
    "mutate, needle",
    [
        # the marker
        (_set(_remedy, "marker", "no_such_marker"), "remedy.marker: 'no_such_marker' is not in log_markers"),
        (_set(_remedy, "marker", "marlin_fallback"), "log_markers.marlin_fallback is null"),
        (_set(_remedy, "marker", "download_complete"), "contains none of log_gates.forbidden"),
        (_set(_remedy, "max", 0), "max: Input should be greater than or equal to 1"),
        (_set(_remedy, "steps", []), "steps: List should have at least 1 item"),
        (_set(_remedy, "on", "dist_store_error"), "unknown key"),
        # unsafe remedy steps, refused like anywhere else, naming the field
        (lambda d: _remedy(d)["steps"].pop(2), "(cold-start-r1).remedy.steps[3] (start-r1): an up must be preceded by a dry_run"),
        (lambda d: _remedy(d)["steps"][3]["up"].__setitem__("services", ["nginx"]), "an up must be preceded by a dry_run"),
        (lambda d: _remedy(d)["steps"][0]["down"].__setitem__("services", []), "services must not be empty"),
        (lambda d: (_remedy(d)["steps"][2]["dry_run"].__setitem__("force_recreate", True),
                    _remedy(d)["steps"][3]["up"].__setitem__("force_recreate", True)), "(dry-run-r1).dry_run.force_recreate: never on an engine"),
        (lambda d: _remedy(d)["steps"].insert(0, {"id": "x", "say": "x", "check": "env_map"}), "check: is a preflight step"),
        (lambda d: _remedy(d)["steps"][0].__setitem__("remedy", copy.deepcopy(_remedy(RAW))), "has no remedy of its own"),
        (lambda d: _remedy(d)["steps"].append(dict(_remedy(d)["steps"][0])), "step id 'stop-r1' is used twice"),
        # where a remedy may stand
        (lambda d: _step(d, "relay-r1").__setitem__("remedy", copy.deepcopy(_remedy(RAW))), "only a logs: gate takes a remedy"),
        (lambda d: _switch(d)["rollback"]["steps"][7].__setitem__("remedy", copy.deepcopy(_remedy(RAW))),
         "a remedy belongs to a gate of a forward phase"),
    ],
)
def test_loader_refuses_an_unsafe_remedy_naming_the_field(mutate, needle):
    with pytest.raises(UserError) as exc:
        parse_runbook(_mutated(mutate), source="t.yaml")
    assert needle in str(exc.value)
    assert "\n" not in str(exc.value)


def test_a_bare_on_key_is_read_by_yaml_as_true_hence_marker():
    # YAML 1.1: `on:` is the boolean true, so the key is `marker:`; a remedy written with `on:` is refused
    assert yaml.safe_load("{on: x}") == {True: "x"}


# -- the table ------------------------------------------------------------------------------------

T = compile_rollout(load_runbook("base-glm53-w4afp8"))
REMEDY = [f"{GATE}.remedy.{s}" for s in ("stop-r1", "wait-r2", "dry-run-r1", "start-r1")]


def test_the_gate_sends_remedy_into_its_chain_and_fail_into_the_rollback():
    assert T.next(GATE, Event.REMEDY) == REMEDY[0]
    assert T.next(GATE, Event.FAIL) == "switch.rollback.perception-stop"
    assert T.next(GATE, Event.OK) == "switch.cold-start-r2"
    assert not T.allows("switch.markers-r1", Event.REMEDY)  # a gate without a remedy has no such edge
    assert T.remedy_cap("switch.markers-r1") == 0


def test_the_remedy_chain_goes_back_to_its_gate():
    m = Machine(T, GATE)
    m.send(Event.REMEDY)
    walked = [m.state]
    while m.state != GATE:
        m.send(Event.OK)
        walked.append(m.state)
    assert walked == [*REMEDY, GATE]
    assert all(T.nodes[s].section == "remedy" and T.nodes[s].phase == "switch" for s in REMEDY)
    assert {T.remedy_of[s] for s in REMEDY} == {GATE}


def test_every_failure_and_abort_inside_the_remedy_takes_the_phases_rollback():
    for s in REMEDY:
        assert T.next(s, Event.FAIL) == "switch.rollback.perception-stop"
        assert T.next(s, Event.ABORT) == "switch.rollback.perception-stop"
        assert T.next(s, Event.HALT) == HALTED
        assert not T.allows(s, Event.REMEDY)


def test_the_remedy_up_goes_back_to_the_remedy_dry_run_and_is_capped():
    up, dry = REMEDY[3], REMEDY[2]
    assert T.next(up, Event.RETRY) == dry and T.covering_dry_run[up] == dry and T.retry_cap(up) == 1


def test_the_cap_lives_in_the_table():
    assert T.remedy_cap(GATE) == 1 and T.remedy_cap("switch.cold-start-r2") == 1
    twice = parse_runbook(_mutated(_set(_remedy, "max", 2)))
    assert compile_rollout(twice).remedy_cap(GATE) == 2


def test_phase_starts_and_reading_order_keep_the_remedy_inside_its_phase():
    assert T.phase_starts == {"prestage": "prestage.downloader-dry-run", "capacity": "capacity.others-serve",
                              "drain": "drain.drain", "switch": "switch.capture-fp8"}
    order = list(T.order)
    assert order[order.index(GATE) + 1:order.index(GATE) + 5] == REMEDY
    assert order[order.index(GATE) + 5] == "switch.cold-start-r2"
    # the happy path never enters a remedy
    m, seen = Machine(T), []
    while not m.terminal:
        seen.append(m.state)
        m.send(Event.OK)
    assert not set(seen) & set(REMEDY)


def test_the_readme_example_loads():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "runbook-language.md").read_text()
    block = re.search(r"```yaml\n(  - id: cold-start-r1.*?)  ```", text, re.S)
    assert block, "docs/runbook-language.md's remedy example is gone"
    data = copy.deepcopy(RAW)
    steps = _switch(data)["steps"]
    i = [s["id"] for s in steps].index("cold-start-r1")
    steps[i] = yaml.safe_load(block.group(1))[0]
    assert parse_runbook(data).phase("switch").steps[i].remedy.marker == "dist_store_error"


def test_a_remedy_state_belongs_to_its_phase_for_resume_retry():
    """`resume --retry` (admission.retry_run) restarts the failed state's forward phase: a halt inside a
    remedy restarts the phase the remedy belongs to, like any other of its steps."""
    for s in REMEDY:
        assert T.phase_start(T.nodes[s].phase) == "switch.capture-fp8"
    assert T.nodes[GATE].phase == "switch"
