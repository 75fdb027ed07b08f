"""Issue 23's gates outside the engines at load time: each construct loads, `plan` renders it with
its thresholds, and a wrong one is refused in one line naming the field (exit 2 from the CLI)."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.engine.step_descriptions import describe_step
from orchestrator.language.runbook import RUNBOOK_DIR, parse_runbook
from orchestrator.util.user_errors import UserError

CANARY = yaml.safe_load((RUNBOOK_DIR / "gpu02-glm53-w4afp8-pdi2-canary.yaml").read_text())
R2 = "model-sg-glm53-w4afp8-tp4-r2"
REGISTRY = "http://127.0.0.1:9/v1/compose-hashes"

PREFLIGHT = [
    {"id": "pr-green", "say": "The tag's PR is merged and its CI is green",
     "pull_request": {"merged": True, "checks": "green", "required": ["validate"]}},
    {"id": "pool-unset", "say": "gpu02's env map does not override the proxy's pool",
     "env": {"absent": ["GLM53_BACKEND_URLS"], "equals": {"LONG_TIER_ONLY": "true"}}},
]
FORWARD = [
    {"id": "note-canary", "say": "A human marks the canary on the dashboard",
     "manual": {"edit": "set CANARY_NOTE=pdi2-{tag} in gpu02's env map on the dashboard",
                "verify": {"env": {"equals": {"CANARY_NOTE": "pdi2-{tag}"}, "within": "2m"}}}},
    {"id": "proxy-pool", "say": "gpu02's own proxy lists r2 healthy",
     "proxy_pool": {"port": 8000, "contains": ["r2"], "within": "2m"}},
    {"id": "r2-image", "say": "r2 runs the image its replica values pin", "image": {"service": R2, "replica": "r2"}},
    {"id": "r2-whole-log", "say": "Keep r2's whole log in the run's directory",
     "capture": {"services": [R2], "tail": 1000000, "to_file": True}},
    {"id": "attested", "say": "compose-manager attests r2's file and tag",
     "attestation": {"services": [R2]}},
    {"id": "hash-registered", "say": "The canary file's hash is registered",
     "http_json": {"url": REGISTRY, "path": "hashes", "contains": "{file_sha256}"}},
]
ROLLBACK_MANUAL = {"id": "unnote-canary", "say": "A human removes the canary mark",
                   "manual": {"edit": "remove CANARY_NOTE from gpu02's env map on the dashboard",
                              "verify": {"env": {"absent": ["CANARY_NOTE"], "within": "10m"}}}}


def with_gates(registry: str = REGISTRY, *, forward: list | None = None, preflight: list | None = None,
               rollback_manual: bool = True, analysis: bool = False) -> dict:
    """The pdi-2 canary with the gates added: preflight ones after the tag check, forward ones after
    verify, a manual step first in the rollback (the readout dropped unless `analysis`)."""
    raw = copy.deepcopy(CANARY)
    raw["name"] = "gpu02-external-gates"
    fwd = copy.deepcopy(FORWARD if forward is None else forward)
    for st in fwd:
        if "http_json" in st and st["http_json"]["url"] == REGISTRY:
            st["http_json"]["url"] = registry
    raw["preflight"] += copy.deepcopy(PREFLIGHT if preflight is None else preflight)
    steps = raw["phases"][0]["steps"]
    if not analysis:
        steps[:] = [s for s in steps if "analysis" not in s]
    at = next(i for i, s in enumerate(steps) if s["id"] == "verify") + 1
    steps[at:at] = fwd
    if rollback_manual:
        raw["phases"][0]["rollback"]["steps"].insert(0, copy.deepcopy(ROLLBACK_MANUAL))
    return raw


def test_the_gates_load_and_plan_renders_each_with_its_thresholds():
    from orchestrator.language.machine import compile_rollout
    from orchestrator.previews.plan import build_plan, render_text

    rb = parse_runbook(with_gates())
    texts = {st.id: describe_step(st, rb).gate for steps in rb.step_lists() for st in steps}
    assert "every CI check run" in texts["pr-green"] and "including validate" in texts["pr-green"]
    assert "GLM53_BACKEND_URLS absent" in texts["pool-unset"] and "LONG_TIER_ONLY = 'true'" in texts["pool-unset"]
    assert "never shown" in texts["pool-unset"]
    assert "MANUAL EDIT by a human: set CANARY_NOTE" in texts["note-canary"] and "orchestrate approve" in texts["note-canary"]
    assert "/backends/list on :8000" in texts["proxy-pool"] and "lists r2 healthy within 2m" in texts["proxy-pool"]
    assert "runs an image pinned by digest sha256:fde25985aea3 (replica_values.r2.engine_image)" in texts["r2-image"]
    assert "kept, scrubbed, in the run's directory (logs/<run id>/<service>.log)" in texts["r2-whole-log"]
    assert "fresh 32-byte nonce" in texts["attested"] and R2 in texts["attested"]
    assert f"GET {REGISTRY}" in texts["hash-registered"] and "hashes contains '{file_sha256}'" in texts["hash-registered"]
    text = render_text(build_plan(rb, compile_rollout(rb), host="gpu02", tag="v0.0.304"))
    manual = [ln for ln in text.splitlines() if ln.startswith("MANUAL: ")]
    assert len(manual) == 2, text[:2000]
    assert "the rollback of phase canary needs a human's edit at canary.rollback.unnote-canary" in manual[1]
    from orchestrator.previews.diagram import render_mermaid

    drawn = render_mermaid(compile_rollout(rb))
    assert '["canary.note-canary (MANUAL EDIT)"]' in drawn and '["canary.rollback.unnote-canary (MANUAL EDIT)"]' in drawn


def _bad(raw: dict) -> str:
    with pytest.raises(UserError) as ei:
        parse_runbook(raw, source="rb")
    msg = str(ei.value)
    assert "\n" not in msg
    return msg


def _one(step: dict, *, preflight: bool = False) -> dict:
    return with_gates(forward=[] if preflight else [step], preflight=[step] if preflight else [], rollback_manual=False)


@pytest.mark.parametrize("step, words", [
    ({"env": {"host": "gpu23"}}, "needs absent: or equals:"),
    ({"env": {"absent": ["A"], "equals": {"A": "x"}}}, "both absent and equal"),
    ({"env": {"absent": ["BAD-KEY"]}}, "is not a variable name"),
    ({"env": {"host": "others", "absent": ["A"]}}, "not others"),
    ({"env": {"equals": {"A": "{image}"}}}, "unknown placeholder {image}"),
    ({"manual": {"edit": "do it"}}, "verify"),
    ({"manual": {"edit": "set X={image}", "verify": {"env": {"absent": ["A"]}}}}, "manual.edit: unknown placeholder {image}"),
    ({"manual": {"edit": "", "verify": {"env": {"absent": ["A"]}}}}, "edit"),
    ({"proxy_pool": {"port": 8000}}, "needs contains: or lacks:"),
    ({"proxy_pool": {"port": 8000, "contains": ["r3"]}}, "'r3', not a replica of the runbook"),
    ({"proxy_pool": {"port": 8000, "contains": ["r2"], "lacks": ["r2"]}}, "both contained in and lacking"),
    ({"pull_request": {"merged": False, "checks": "ignore"}}, "checks nothing"),
    ({"pull_request": {"checks": "ignore", "required": ["validate"]}}, "need checks: green"),
    ({"http_json": {"url": "ftp://x/y", "path": "a", "equals": 1}}, "must be an http(s) URL"),
    ({"http_json": {"url": "http://x/{nope}", "path": "a", "equals": 1}}, "unknown placeholder {nope}"),
    ({"http_json": {"url": "http://x/", "path": "a", "equals": 1, "contains": "b"}}, "exactly one of equals:, contains:"),
    ({"http_json": {"url": "http://x/", "path": "a..b", "equals": 1}}, "empty segment"),
    ({"attestation": {"services": []}}, "services"),
    ({"image": {"service": R2}}, "exactly one of digest: or replica:"),
    ({"capture": {"services": [R2], "tail": 30000}}, "set to_file: true"),
    ({"image": {"service": R2, "digest": "sha256:xyz"}}, "digest"),
    ({"image": {"service": R2, "replica": "r9"}}, "needs replica_values.r9.engine_image"),
    ({"manual": {"edit": "x", "verify": {"env": {"absent": ["A"]}}}, "observe": True}, "observe: true is for evidence gates"),
])
def test_a_wrong_construct_is_refused_in_one_line_naming_it(step, words):
    msg = _bad(_one({"id": "gate", "say": "a gate", **step}))
    assert words in msg, msg
    assert "phases" in msg or "preflight" in msg


def test_the_manual_step_is_an_approval_gate_of_the_run(tmp_path: Path):
    from orchestrator.journal.sqlite import SqliteJournal
    from orchestrator.service.signals import run_gates

    rb = parse_runbook(with_gates())
    journal = SqliteJournal(":memory:")
    run = journal.create_run(host="gpu02", runbook=rb.name, tag="v0.0.304", kind="rollout", state="preflight.read-env",
                             context={})
    assert {"canary.note-canary", "canary.rollback.unnote-canary"} <= run_gates(run, lambda: rb)


def test_orchestrate_plan_refuses_a_wrong_gate_with_one_line_and_exit_2(tmp_path: Path):
    path = tmp_path / "bad-gates.yaml"
    path.write_text(yaml.safe_dump(_one({"id": "gate", "say": "a gate", "proxy_pool": {"port": 8000, "contains": ["r9"]}})))
    exe = Path(sys.executable).parent / "orchestrate"
    res = subprocess.run([str(exe), "plan", "gpu02", "--tag", "v0.0.304", "--runbook", str(path),
                          "--inventory", str(Path(__file__).resolve().parents[2] / "config" / "hosts.yaml")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    out = (res.stdout + res.stderr).strip()
    assert "'r9', not a replica of the runbook" in out and "Traceback" not in out
    assert len(out.splitlines()) == 1


def test_status_says_a_run_at_a_manual_step_waits_for_an_approval(tmp_path: Path):
    from orchestrator.journal.owner import owner_text
    from orchestrator.journal.sqlite import SqliteJournal
    from orchestrator.language.machine import compile_rollout
    from orchestrator.service.activity import run_activity

    rb = parse_runbook(with_gates())
    table = compile_rollout(rb)
    j = SqliteJournal(tmp_path / "j.sqlite3")
    try:
        run = j.create_run(host="gpu02", runbook=rb.name, tag="v0.0.304", kind="rollout", state="canary.note-canary", context={})
        j.acquire_lease("gpu02", run.run_id, owner_text(), 60)
        act = run_activity(run, j, table)
        assert act.label == "waiting for approval"
        assert "set CANARY_NOTE" in act.detail and "--gate canary.note-canary" in act.detail
        j.approve(run.run_id, "canary.note-canary", by="carol")
        assert run_activity(run, j, table).label == "running"  # approved: verifying the edit
    finally:
        j.close()


def test_a_rollback_entered_anywhere_names_its_manual_edits_before_it_runs():
    from orchestrator.engine.steps.manual import manual_edits_ahead
    from orchestrator.language.machine import compile_rollout

    table = compile_rollout(parse_runbook(with_gates()))
    ahead = manual_edits_ahead(table, "canary.rollback.unnote-canary")
    assert ahead == ["canary.rollback.unnote-canary: remove CANARY_NOTE from gpu02's env map on the dashboard"]
    assert manual_edits_ahead(table, "canary.rollback.relay-stop") == []  # past it: nothing more to ask
    assert manual_edits_ahead(table, "canary.verify") == []  # a forward state is no rollback
