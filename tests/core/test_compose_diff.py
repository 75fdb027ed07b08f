"""What a rollout recreates, from the diff of the file at the base ref and the pull request's
(orchestrator.previews.compose_diff), held against the runbook that deploys it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.language.runbook import load_runbook
from orchestrator.previews.ci_preview import preview
from orchestrator.previews.compose_diff import check_changes, service_changes
from orchestrator.previews.runbook_lines import RunbookLines

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "orchestrator_sim" / "compose"
NEW = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"
SEED = (SIM / NEW).read_text()
PDI2 = (SIM / "tags" / "v0.0.304" / NEW).read_text()
CANARY = (SIM / "prod" / "GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml").read_text()
R1, R2 = "model-sg-glm53-w4afp8-tp4-r1", "model-sg-glm53-w4afp8-tp4-r2"


def _once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def _check(runbook: str, old: str, new: str) -> list[str]:
    rb = load_runbook(runbook)
    _, findings = check_changes(rb, service_changes(old, new), RunbookLines(rb), "base")
    return [f.line(NEW) for f in findings]


def test_each_service_is_classified_as_compose_decides():
    changes = service_changes(SEED, PDI2)
    assert changes[R2] == "recreated" and changes[R1] == "unchanged" and changes["otelcol-contrib"] == "config-only"
    # the relay gains its :8010 route to DCGM (the canary's device-memory gate)
    assert {k for k, v in changes.items() if v != "unchanged"} == {R2, "otelcol-contrib", "glm53-soak-relay"}
    moved = service_changes(CANARY, SEED)
    assert moved["model-sg-glm53-fp8-tp4-r2"] == "removed" and moved[R2] == "added" and moved["glm53-soak-relay"] == "config-only"
    # a key compose leaves out of its config hash changes nothing; an interpolated default does
    assert service_changes(SEED, _once(SEED, '    profiles: ["maintenance"]', '    profiles: ["upkeep"]'))["hf-cleanup"] == "unchanged"
    assert service_changes(SEED, _once(SEED, "${GLM53_HICACHE_CUDA_HOST_MEMORY:-1}", "${GLM53_HICACHE_CUDA_HOST_MEMORY:-0}"))[R1] == "recreated"
    # the same change through the env map in both files: nothing to recreate
    same = service_changes(SEED, SEED, {"GLM53_HICACHE_CUDA_HOST_MEMORY": "0"})
    assert set(same.values()) == {"unchanged"}


def test_the_runbooks_as_shipped_carry_what_their_diffs_need():
    assert _check("gpu02-glm53-w4afp8-pdi2-canary", SEED, PDI2) == []
    assert _check("gpu02-glm53-w4afp8-long-context", CANARY, SEED) == []


def test_a_changed_engine_the_runbook_never_starts_fails_with_the_steps_to_add():
    both = _once(PDI2, "      --watchdog-timeout 1800\n      --host", "      --watchdog-timeout 3600\n      --host")
    lines = _check("gpu02-glm53-w4afp8-pdi2-canary", SEED, both)
    assert len(lines) == 1
    assert lines[0].startswith(f"{NEW}: {R1}: change since base: found recreated, expected a phase that stops it and starts it")
    assert "relied on by runbooks/gpu02-glm53-w4afp8-pdi2-canary.yaml:" in lines[0]


def test_a_recreated_engine_the_runbook_starts_without_stopping_it_first_fails():
    # #294's runbook assumes its new r2 absent: a change of that r2 alone is an up with no down first
    changed = _once(SEED, "--dist-init-addr 127.0.0.1:29511", "--dist-init-addr 127.0.0.1:29512")
    lines = _check("gpu02-glm53-w4afp8-long-context", SEED, changed)
    assert lines == [f"{NEW}: {R2}: change since base: found recreated (an engine), expected stopped first: add "
                     f"`down: {{file: new, services: [{R2}]}}` before step apply (relied on by "
                     f"runbooks/gpu02-glm53-w4afp8-long-context.yaml:{_line_of('gpu02-glm53-w4afp8-long-context', '      - id: apply', 1) + 2} r2/apply up)"]


def _line_of(runbook: str, text: str, nth: int) -> int:
    lines = (ROOT / "runbooks" / f"{runbook}.yaml").read_text().splitlines()
    return [i for i, line in enumerate(lines, 1) if line == text][nth - 1]


def test_a_config_only_change_the_runbook_does_not_force_recreate_fails():
    changed = _once(PDI2, "  nginx_conf:\n    content: |\n", "  nginx_conf:\n    content: |\n      # reviewed\n")
    lines = _check("gpu02-glm53-w4afp8-pdi2-canary", SEED, changed)
    assert lines == [f"{NEW}: nginx: change since base: found config-only (compose keeps the old config, docker/compose#11900), "
                     f"expected a scoped force-recreate: add `dry_run: {{file: new, services: [nginx], force_recreate: true}}` "
                     f"and the same `up` (relied on by runbooks/gpu02-glm53-w4afp8-pdi2-canary.yaml:"
                     f"{_line_of('gpu02-glm53-w4afp8-pdi2-canary', 'phases:', 1)} phases)"]


@pytest.fixture
def repo(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("needs git")
    r = tmp_path / "compose-files"
    shutil.copytree(SIM / "prod", r / "prod")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"]):
        subprocess.run(["git", "-C", str(r), *args], check=True, capture_output=True)
    return r


def test_ci_preview_with_a_base_ref_shows_what_is_recreated_and_fails_on_a_missing_stop(repo):
    (repo / NEW).write_text(PDI2)
    md, failures = preview([NEW], repo, base_ref="main")
    assert failures == []
    assert f"### `{NEW}`: what the rollout will recreate (vs `{NEW} at main`)" in md
    assert f"| `{R2}` | recreated |" in md and "| `otelcol-contrib` | config-only |" in md and f"| `{R1}` | unchanged |" in md
    (repo / NEW).write_text(_once(PDI2, "      --watchdog-timeout 1800\n      --host", "      --watchdog-timeout 3600\n      --host"))
    md, failures = preview([NEW], repo, base_ref="main")
    assert any(f"vs runbook gpu02-glm53-w4afp8-pdi2-canary: {NEW}: {R1}: change since {NEW} at main: found recreated" in f
               for f in failures)
    assert f"| `{R1}` | recreated |" in md
    md, failures = preview([NEW], repo)  # without a base ref: no diff, and r1's watchdog is nobody's contract
    assert failures == [] and "what the rollout will recreate" not in md
