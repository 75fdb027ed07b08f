"""`orchestrate plan` and the CLI's bad-input handling, through the real entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REF = ROOT / "tests" / "data" / "reference" / "compose"


def orchestrate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_plan_json_lists_every_compose_call_with_method_path_body():
    r = orchestrate("plan", "gpu02", "--tag", "v0.0.300", "--format", "json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    calls = [s["request"] for s in plan["steps"] if s["request"]]
    assert all(set(c) == {"method", "path", "body"} for c in calls)
    assert all(c["body"]["services"] for c in calls)
    assert all(c["body"]["env"] == "<env map of gpu02, read at run time>" for c in calls)
    forward = [s for s in plan["steps"] if s["section"] == "forward"]
    # r2 before r1; every up preceded by a dry run of the same request
    assert [s["phase"] for s in forward].index("r2") < [s["phase"] for s in forward].index("r1")
    prev = None
    for s in forward:
        req = s["request"]
        if req and req["path"] == "/compose/up" and not req["body"]["dry_run"]:
            assert prev is not None and prev["body"] | {"dry_run": False} == req["body"], s["state"]
        if req:
            prev = req
    assert all(s["on_fail"] for s in plan["steps"] if s["section"] != "terminal")
    assert "rank_budget_bytes=108984795136" in plan["budget"]


@pytest.mark.parametrize("fmt, needle", [("text", "[ ]  1. preflight.read-env"), ("markdown", "- [ ] **1. `preflight.read-env`**")])
def test_plan_text_and_markdown_read_like_a_checklist(fmt, needle):
    r = orchestrate("plan", "gpu02", "--tag", "v0.0.300", "--format", fmt)
    assert r.returncode == 0, r.stderr
    assert needle in r.stdout
    assert "r1.rollback.stop-new" in r.stdout and "rollback-r2.up-old" in r.stdout
    assert "orphans: none" in r.stdout


def test_compose_file_check_flags_the_later_revisions_650gib_r2():
    r = orchestrate("plan", "gpu02", "--tag", "v0.0.300", "--compose-file", str(REF / "GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"))
    assert r.returncode == 1
    assert "650GiB" in r.stderr and "GLM53_R2_HICACHE_RAM_BUDGET" in r.stderr
    assert "model-downloader" in r.stdout  # the scoped up drags it in through depends_on


def test_compose_file_check_passes_on_the_seed_version():
    seed = ROOT / "orchestrator_sim" / "compose" / "prod" / "GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"
    if not seed.exists():
        pytest.skip("simulator fixture file not present")
    r = orchestrate("plan", "gpu02", "--tag", "v0.0.300", "--compose-file", str(seed))
    assert r.returncode == 0, r.stderr



def test_env_interpolates_the_compose_file_with_the_hosts_values_never_printing_them(tmp_path):
    seed = ROOT / "orchestrator_sim" / "compose" / "prod" / "GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"
    env = tmp_path / "gpu02.env"
    env.write_text("# the host's map\nLONG_TIER_ONLY=false-but-secretish-7f3a\n")
    r = orchestrate("plan", "gpu02", "--tag", "v0.0.300", "--compose-file", str(seed), "--env", str(env))
    assert r.returncode == 1, r.stderr
    assert "LONG_TIER_ONLY: found (a value from the env map, not shown), expected true" in r.stderr
    assert "secretish" not in r.stdout + r.stderr
    env.write_text("LONG_TIER_ONLY=true\n")
    assert orchestrate("plan", "gpu02", "--tag", "v0.0.300", "--compose-file", str(seed), "--env", str(env)).returncode == 0


@pytest.mark.parametrize(
    "args, needle",
    [
        (("plan", "gpu99", "--tag", "v0.0.300"), "unknown host 'gpu99'"),
        (("plan", "gpu02", "--tag", "300"), "tags look like v0.0.N"),
        (("plan", "gpu02", "--tag", "v0.0.300", "--runbook", "nope"), "runbook 'nope' not found"),
        (("plan", "gpu02", "--tag", "v0.0.300", "--inventory", "/nonexistent.yaml"), "cannot read inventory"),
        (("plan", "gpu02", "--tag", "v0.0.300", "--format", "pdf"), "--format"),
    ],
)
def test_bad_input_is_one_line_exit_2_no_traceback(args, needle):
    r = orchestrate(*args)
    assert r.returncode == 2
    assert needle in r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_invalid_inventory_names_the_field(tmp_path):
    inv = tmp_path / "hosts.yaml"
    inv.write_text((ROOT / "config" / "hosts.yaml").read_text().replace("gpus: 8", "gpus: eight", 1))
    r = orchestrate("plan", "gpu02", "--tag", "v0.0.300", "--inventory", str(inv))
    assert r.returncode == 2 and "hosts.gpu02.gpus" in r.stderr


def test_demo_lists_every_fault():
    r = orchestrate("demo", "--list-faults")
    assert r.returncode == 0, r.stderr
    for name in ("oom:r1|:r2", "cut-after-effect", "zombie-after-down", "busy-409:N", "budget-no-fit"):
        assert name in r.stdout


def test_plan_live_without_tokens_is_one_line_exit_2(tmp_path):
    """A user error before anything is contacted: which token to set, one line, exit 2."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env["ORCHESTRATOR_STATE_DIR"] = str(tmp_path)
    inventory = tmp_path / "hosts.yaml"  # the checkout's, on names that are not placeholders (never contacted)
    inventory.write_text((root / "config" / "hosts.yaml").read_text().replace(".example.invalid", ".localhost"))
    r = subprocess.run([sys.executable, "-m", "orchestrator.cli", "plan", "gpu02", "--tag", "v0.0.300", "--live",
                        "--inventory", str(inventory)],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "ORCHESTRATOR_COMPOSE_MANAGER_TOKEN" in r.stderr
