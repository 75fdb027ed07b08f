"""Issue 23's gates outside the engines end to end on the simulator: the pdi-2 canary with a PR/CI
gate and an env-map check in preflight, then after r2 serves a manual edit (approved by a human,
verified on the dashboard), the host's own proxy pool, compose-manager's attestation and a
compose-hash registry; its rollback starts with a manual edit it announces up front.

Each family passes on a healthy simulator and fails, naming its evidence, under its fault."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml

from tests.core.test_gate_specs import R2, with_gates

pytestmark = pytest.mark.e2e

TAG = "v0.0.304"
NOTE = f"pdi2-{TAG}"


class Human:
    """What the operator does when the run asks: makes the dashboard edit a manual step names and
    approves it (`approve`), and removes the mark when a rollback announces it needs that."""

    def __init__(self, e, *, approve: bool = True, edit: bool = True) -> None:
        self.e, self.approve, self.edit = e, approve, edit
        self.events: list[tuple[str, dict]] = []
        self.state = None

    def event(self, kind: str, /, **fields) -> None:
        self.events.append((kind, fields))
        if kind == "step_started":
            self.state = fields["state"]
        elif kind == "waiting" and "MANUAL EDIT" in str(fields.get("gate")):
            if self.edit and "MANUAL EDIT: set CANARY_NOTE" in str(fields["gate"]):
                self.e.fleet.set_env_var("CANARY_NOTE", NOTE)
            if self.approve:
                run_id = str(fields["gate"]).split("orchestrate approve ", 1)[1].split()[0]
                self.e.session.journal.approve(run_id, self.state, by="carol")
        elif kind == "note" and "this rollback needs a human's edit" in str(fields.get("text")):
            self.e.fleet.set_env_var("CANARY_NOTE", None)

    def notes(self) -> str:
        return json.dumps([f for k, f in self.events if k in ("transition", "note", "waiting")])


def invariants(e) -> list[str]:
    """The simulator's rules, but for the env map's CANARY_NOTE: the human's edit changes the map
    mid-run, so calls before (or after) it carry the map of their time, not the final one."""
    return [f for f in e.fleet.check_invariants() if "CANARY_NOTE" not in f]


def gates_run(e, tmp_path, *, yes: bool = False, human: Human | None = None):
    from orchestrator.service.admission import new_rollout
    from orchestrator.service.runner import execute

    path = tmp_path / f"gpu02-external-gates-{len(list(tmp_path.glob('*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(with_gates(e.fleet.urls.registry + "/v1/compose-hashes")))
    run, rb, table = new_rollout(e.session, "gpu02", TAG, str(path))
    human = human or Human(e)
    final = asyncio.run(execute(e.session, run, rb, table, progress=human, yes=yes))
    return final, human


def test_every_gate_passes_on_a_healthy_host_with_a_human_making_the_edit(e2e_factory, tmp_path):
    e = e2e_factory(initial="long-context")
    final, human = gates_run(e, tmp_path)
    assert final.outcome == "DONE", final.message
    text = human.notes()
    assert "PR #" in text and "2 CI checks green" in text
    assert "GLM53_BACKEND_URLS absent" in text
    assert "MANUAL EDIT: set CANARY_NOTE" in text and "manual edit made and verified" in text
    assert "the host's proxy (:8000) lists r2" in text
    assert f"attested: {R2} <- prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml@{TAG}" in text
    assert "hashes holds" in text
    assert f"{R2} runs sha256:fde25985aea3 as pinned" in text
    kept = e.state_dir / "logs" / final.run_id / f"{R2}.log"  # the whole log, beside the run's log
    lines = kept.read_text().splitlines()
    assert len(lines) > 50 and any("The server is fired up and ready to roll!" in ln for ln in lines)
    assert e.fleet.dashboard_env["PROXY_TOKEN"] not in kept.read_text()
    assert e.fleet.host.container(R2).tag == TAG
    waits = [f["gate"] for k, f in human.events if k == "waiting" and "MANUAL EDIT" in str(f.get("gate"))]
    assert f"set CANARY_NOTE={NOTE} in gpu02's env map" in waits[0]  # the instruction, its placeholders filled
    verified = [f["note"] for k, f in human.events if k == "transition" and f["state"] == "canary.note-canary"]
    assert verified and NOTE not in verified[0]  # what the gate read is never printed
    assert invariants(e) == []


@pytest.mark.parametrize("fault, outcome, words", [
    ("ci-failing", "ABORTED", "check validate concluded failure"),
    ("proxy-pool-stale", "ROLLED_BACK", "does not list r2"),
    ("attestation-file-mismatch", "ROLLED_BACK", "attested file_sha256"),
    ("hash-unregistered", "ROLLED_BACK", "which does not contain"),
])
def test_each_gate_fails_on_its_fault_and_the_rollback_says_its_manual_edit_first(e2e_factory, tmp_path, fault, outcome, words):
    e = e2e_factory(fault, initial="long-context")
    final, human = gates_run(e, tmp_path)
    assert final.outcome == outcome, final.message
    text = human.notes()
    assert words in text, text[-3000:]
    if outcome == "ROLLED_BACK":
        kinds = [(k, str(f.get("text") or f.get("state") or "")) for k, f in human.events]
        said = kinds.index(("note", "this rollback needs a human's edit: canary.rollback.unnote-canary: remove CANARY_NOTE "
                                    "from gpu02's env map on the dashboard"))
        first = next(i for i, (k, s) in enumerate(kinds) if k == "step_started" and ".rollback." in s)
        assert said < first, "announced before the rollback's first step"
        assert "CANARY_NOTE" not in e.fleet.dashboard_env
        assert e.fleet.host.container(R2).tag != TAG
    assert invariants(e) == []


def test_an_env_map_override_refuses_in_preflight(e2e_factory, tmp_path):
    e = e2e_factory(initial="long-context")
    e.fleet.set_env_var("GLM53_BACKEND_URLS", "http://model-sg-glm53-w4afp8-tp4-r1:8000")
    final, human = gates_run(e, tmp_path)
    assert final.outcome == "ABORTED", final.message
    assert "GLM53_BACKEND_URLS is set (value not shown)" in final.message
    assert "tp4-r1:8000" not in human.notes()


def test_a_manual_edit_approved_but_not_made_rolls_back(e2e_factory, tmp_path):
    e = e2e_factory(initial="long-context")
    final, human = gates_run(e, tmp_path, human=Human(e, edit=False), yes=False)
    assert final.outcome == "ROLLED_BACK", final.message
    assert "the manual edit was approved but does not hold: gpu02's env map: CANARY_NOTE is not set" in final.message
