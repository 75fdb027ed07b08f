"""Runbook errors a writer meets: one location style counting from 1 as `plan` counts (the loader's
own rules and the schema's alike), YAML 1.1's `on:` read as `true` named as such, and an offline
`plan` that refuses what the inventory cannot give (another host's env map, a Prometheus API) in
one line, exit 2.

Mutation list (each guard disabled in the source, the named test seen failing, the source restored):
- runbook.field_path's `part + 1` -> test_a_schema_error_and_a_rule_error_name_a_step_alike;
- runbook._boolean_key's check in parse_runbook -> test_a_bare_on_key_is_named_and_told_to_be_quoted;
- Runbook.inventory_problem's env-host check -> test_offline_plan_refuses_an_env_host_the_inventory_does_not_list;
- Runbook.inventory_problem's prometheus_url check -> test_offline_plan_refuses_a_query_gate_on_a_host_without_prometheus_url.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.language.runbook import RUNBOOK_DIR, parse_runbook
from orchestrator.util.user_errors import UserError

ROOT = Path(__file__).resolve().parents[2]
LONG = yaml.safe_load((RUNBOOK_DIR / "gpu02-glm53-w4afp8-long-context.yaml").read_text())
CANARY = yaml.safe_load((RUNBOOK_DIR / "gpu02-glm53-w4afp8-pdi2-canary.yaml").read_text())


def _bad(raw: dict) -> str:
    with pytest.raises(UserError) as ei:
        parse_runbook(raw, source="rb")
    msg = str(ei.value)
    assert "\n" not in msg
    return msg


def _step_of(raw: dict, phase: str, step_id: str) -> tuple[int, dict]:
    ph = next(p for p in raw["phases"] if p["name"] == phase)
    return next((i, s) for i, s in enumerate(ph["steps"]) if s["id"] == step_id)


def test_a_schema_error_and_a_rule_error_name_a_step_alike():
    raw = copy.deepcopy(CANARY)
    i, apply = _step_of(raw, "canary", "apply")
    assert i == 5  # the sixth step of the phase: named steps[6], as plan numbers from 1
    apply["up"]["services"] = "all"
    assert "invalid at phases.canary.steps[6] (apply).up.services:" in _bad(raw)
    raw = copy.deepcopy(CANARY)
    _, apply = _step_of(raw, "canary", "apply")
    apply["up"]["services"] = ["model-sg-glm53-w4afp8-tp4-r1"]  # not what the dry run before it asked
    assert "phases.canary.steps[6] (apply): an up must be preceded by a dry_run" in _bad(raw)
    raw = copy.deepcopy(CANARY)
    raw["preflight"][1]["check"] = "budgett"
    assert "invalid at preflight[2] (budget).check:" in _bad(raw)
    raw = copy.deepcopy(CANARY)
    raw["preflight"][1] = {**raw["preflight"][1], "id": "read-env"}
    assert "preflight[2]: step id 'read-env' is used twice" in _bad(raw)


def test_a_bare_on_key_is_named_and_told_to_be_quoted():
    text = (RUNBOOK_DIR / "gpu02-glm53-w4afp8-long-context.yaml").read_text()
    raw = yaml.safe_load(text)
    _, cold = _step_of(raw, "r2", "cold-start")
    cold["remedy"] = yaml.safe_load("on: cuda_801\nsteps: []\n")  # what a writer gets from `on:`
    assert True in cold["remedy"]
    msg = _bad(raw)
    assert "invalid at phases.r2.steps[" in msg and "(cold-start).remedy: a key YAML 1.1 reads as true" in msg
    assert 'quote it if it is a word ("on":)' in msg and "marker:" in msg


# -- what the inventory must give, offline -------------------------------------------------------------

QUERY = {"id": "cache-space", "say": "At least 250 GiB free on the model cache's filesystem",
         "query": {"promql": 'min(node_filesystem_avail_bytes{host="{host}", mountpoint="/var/lib/docker"})',
                   "min": 268435456000}}
ENV = {"id": "dashboard-env", "say": "gpu99's env map holds no pool override",
       "env": {"host": "gpu99", "absent": ["GLM53_BACKEND_URLS"]}}


def _with(step: dict) -> dict:
    raw = copy.deepcopy(CANARY)
    raw["preflight"].append(copy.deepcopy(step))
    return raw


def test_inventory_problem_names_the_step_and_what_to_fix():
    rb = parse_runbook(_with(QUERY))
    assert rb.inventory_problem("gpu02", ["gpu02"], has_prometheus=True) is None
    msg = rb.inventory_problem("gpu02", ["gpu02"], has_prometheus=False)
    assert msg == (f"runbook {rb.name}'s preflight[7] (cache-space) reads a query: gate, but the inventory names no "
                   f"prometheus_url for gpu02: add it to the host's entry")
    rb = parse_runbook(_with(ENV))
    assert "reads the env map of host 'gpu99', which the inventory does not list (gpu02, gpu23): fix env.host" in \
        (rb.inventory_problem("gpu02", ["gpu23", "gpu02"], has_prometheus=False) or "")
    assert rb.inventory_problem("gpu02", ["gpu02", "gpu99"], has_prometheus=False) is None


def _plan(tmp_path: Path, raw: dict) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "rb.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    exe = Path(sys.executable).parent / "orchestrate"
    return subprocess.run([str(exe), "plan", "gpu02", "--tag", "v0.0.304", "--runbook", str(path),
                           "--inventory", str(ROOT / "config" / "hosts.yaml")], capture_output=True, text=True, timeout=120)


def test_offline_plan_refuses_a_query_gate_on_a_host_without_prometheus_url(tmp_path: Path):
    res = _plan(tmp_path, _with(QUERY))
    out = (res.stdout + res.stderr).strip()
    assert res.returncode == 2, out
    assert len(out.splitlines()) == 1 and "Traceback" not in out
    assert "preflight[7] (cache-space) reads a query: gate, but the inventory names no prometheus_url for gpu02" in out


def test_offline_plan_refuses_an_env_host_the_inventory_does_not_list(tmp_path: Path):
    res = _plan(tmp_path, _with(ENV))
    out = (res.stdout + res.stderr).strip()
    assert res.returncode == 2, out
    assert len(out.splitlines()) == 1 and "reads the env map of host 'gpu99', which the inventory does not list" in out
