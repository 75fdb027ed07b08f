"""Which services differ only in inline `configs:` content (docker/compose#11900: compose does not
recreate them), and the compose-file check that the runbook force-recreates exactly those."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import yaml

from orchestrator.hosts.compose_file import config_only_changes
from orchestrator.language.runbook import RUNBOOK_DIR, parse_runbook
from orchestrator.previews.compose_check import check_config_only_recreates

SIM_COMPOSE = Path(__file__).resolve().parents[2] / "orchestrator_sim" / "compose"
RAW = yaml.safe_load((RUNBOOK_DIR / "gpu02-glm53-w4afp8-long-context.yaml").read_text())

OLD = """
services:
  relay: {image: nginx, configs: [{source: relay_conf, target: /etc/nginx/nginx.conf}]}
  collector: {image: otel, profiles: [a], configs: [collector_conf]}
  proxy: {image: proxy:1, configs: [relay_conf]}
  plain: {image: x}
configs:
  relay_conf: {content: "listen 8009; backend old"}
  collector_conf: {content: "labels: fp8"}
"""
NEW = """
services:
  relay: {image: nginx, configs: [{source: relay_conf, target: /etc/nginx/nginx.conf}]}
  collector: {image: otel, configs: [collector_conf]}
  proxy: {image: proxy:2, configs: [relay_conf]}
  plain: {image: x}
  added: {image: y, configs: [collector_conf]}
configs:
  relay_conf: {content: "listen 8009; backend new"}
  collector_conf: {content: "labels: w4afp8"}
"""


def test_config_only_changes_are_the_services_compose_would_not_recreate():
    # profiles are outside compose's config hash; proxy's image changed (recreated anyway); plain
    # did not change at all; added is new
    assert config_only_changes(OLD, NEW) == ["relay", "collector"]
    assert config_only_changes(NEW, NEW) == []


def test_the_shipped_files_relay_and_collector_differ_only_in_inline_configs():
    prod = SIM_COMPOSE / "prod"
    assert config_only_changes((prod / "GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml").read_text(),
                               (prod / "GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml").read_text()) == \
        ["glm53-soak-relay", "otelcol-contrib"]


def _repo(tmp_path: Path) -> Path:
    shutil.copytree(SIM_COMPOSE / "prod", tmp_path / "prod")
    return tmp_path / RAW["file"]


def _steps(d, phase):
    return next(p for p in d["phases"] if p["name"] == phase)["steps"]


def test_the_shipped_runbook_force_recreates_exactly_the_config_only_services(tmp_path):
    checks, problems = check_config_only_recreates(parse_runbook(copy.deepcopy(RAW), source="t.yaml"), _repo(tmp_path))
    assert problems == []
    assert checks == ["only inline configs content differs for glm53-soak-relay, otelcol-contrib: force-recreated alone, both ways"]


def test_a_config_only_service_left_to_a_plain_up_is_a_mismatch(tmp_path):
    d = copy.deepcopy(RAW)
    for st in _steps(d, "r2"):
        if st["id"] in ("collector-dry-run", "collector-up"):
            (st.get("dry_run") or st["up"]).pop("force_recreate")
    _, problems = check_config_only_recreates(parse_runbook(d, source="t.yaml"), _repo(tmp_path))
    assert len(problems) == 1 and problems[0].startswith("otelcol-contrib differ only in inline configs content")
    assert "Going to the new file" in problems[0]


def test_a_forced_recreate_of_a_changed_service_is_a_mismatch(tmp_path):
    d = copy.deepcopy(RAW)
    for st in _steps(d, "r2"):
        if st["id"] in ("sidecars-dry-run", "sidecars-up"):
            (st.get("dry_run") or st["up"])["force_recreate"] = True
    _, problems = check_config_only_recreates(parse_runbook(d, source="t.yaml"), _repo(tmp_path))
    assert any(p.startswith("step sidecars-dry-run: force_recreate on proxy-glm53, dcgm-glm53") for p in problems)


def test_without_the_previous_file_at_hand_nothing_is_claimed(tmp_path):
    path = tmp_path / "elsewhere.yaml"
    shutil.copy(SIM_COMPOSE / RAW["file"], path)
    assert check_config_only_recreates(parse_runbook(copy.deepcopy(RAW), source="t.yaml"), path) == ([], [])
