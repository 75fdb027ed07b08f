"""The compose-files CI job (examples/ci/preview.sh -> `orchestrate ci-preview`) on a fixture
repository: a temp git repo whose branch changes a file, exactly as the workflow runs it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.previews.ci_preview import runbooks_affected_by

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "ci" / "preview.sh"
NEW = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"
OLD = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml"
CANONICAL = "prod/GLM-5.3-Flash-SGL-TP4.yaml"
SIM_FILES = ROOT / "orchestrator_sim" / "compose"
#: The real later revision: r2 reads GLM53_R2_HICACHE_RAM_BUDGET:-650GiB, which the runbook does not govern.
REFERENCE = ROOT / "tests" / "data" / "reference" / "compose" / "GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"

pytestmark = pytest.mark.skipif(shutil.which("git") is None or shutil.which("bash") is None, reason="needs git and bash")


def test_runbooks_affected_by_names_the_deploying_runbook_and_its_role():
    # the LongContext file is #294's runbook's new file and the pdi-2, #302 and #332 canaries' (issue 23), which edit r2 in it
    assert [(a.runbook.name, a.role) for a in runbooks_affected_by(NEW)] == [("gpu02-glm53-2xtp2-memopt-canary", "new"),
                                                                               ("gpu02-glm53-w4afp8-long-context", "new"),
                                                                               ("gpu02-glm53-w4afp8-pdi2-canary", "new"),
                                                                               ("gpu02-glm53-w4afp8-qsplit-canary", "new")]
    # the Canary path is #294's rollback target (gpu02's revision) and the gpu04 canary's new file (its later revision)
    assert [(a.runbook.name, a.role) for a in runbooks_affected_by("./" + OLD)] == [("gpu02-glm53-w4afp8-long-context", "previous"),
                                                                                     ("gpu04-glm53-w4afp8-canary", "new")]
    assert runbooks_affected_by("prod/Unrelated.yaml") == []


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


@pytest.fixture
def repo(tmp_path):
    """main holds the simulator's copies of the files; the test changes one on branch `pr`."""
    r = tmp_path / "compose-files"
    shutil.copytree(SIM_FILES / "prod", r / "prod")
    (r / "README.md").write_text("compose files\n")
    _git(r, "init", "-q", "-b", "main")
    _git(r, "add", "-A")
    _git(r, "commit", "-q", "-m", "base")
    _git(r, "checkout", "-q", "-b", "pr")
    return r


def _preview(repo: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, str]:
    summary = tmp_path / "summary.md"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env.update({"GITHUB_STEP_SUMMARY": str(summary), "ORCHESTRATE": str(Path(sys.executable).parent / "orchestrate")})
    r = subprocess.run(["bash", str(SCRIPT), "main"], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    return r, summary.read_text() if summary.exists() else ""


def test_a_change_that_breaks_the_runbook_fails_with_the_mismatch_named(repo, tmp_path):
    shutil.copy(REFERENCE, repo / NEW)
    _git(repo, "commit", "-q", "-am", "r2 budget of its own")
    r, summary = _preview(repo, tmp_path)
    assert r.returncode == 1, r.stderr
    assert "model-sg-glm53-w4afp8-tp4-r2: budget default 650GiB in the file, the runbook expects 406GiB" in r.stderr
    assert "GLM53_R2_HICACHE_RAM_BUDGET" in r.stderr
    assert f"### `{NEW}` — runbook `gpu02-glm53-w4afp8-long-context` (**mismatch**)" in summary
    assert "<details>" in summary and summary == r.stdout


def test_a_matching_change_to_the_deployed_file_passes_with_the_plan(repo, tmp_path):
    path = repo / NEW
    path.write_text(path.read_text() + "\n# a comment\n")
    _git(repo, "commit", "-q", "-am", "comment")
    r, summary = _preview(repo, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "(checked)" in summary and "- ok: every service the runbook names with file: new is defined" in summary


def test_an_unrelated_change_passes(repo, tmp_path):
    (repo / "prod" / "Unrelated.yaml").write_text("services: {}\n")
    (repo / "README.md").write_text("changed\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "unrelated")
    r, summary = _preview(repo, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "### Not deployed by any runbook" in summary and "`prod/Unrelated.yaml`" in summary
    assert "runbook `" not in summary


def test_a_change_to_the_rollback_target_file_is_shown_not_checked(repo, tmp_path):
    path = repo / CANONICAL  # only ever a rollback target (the base tier's and the gpu04 canary's)
    path.write_text(path.read_text() + "\n# touched\n")
    _git(repo, "commit", "-q", "-am", "touch canary")
    r, summary = _preview(repo, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "(rollback target, not checked)" in summary


def test_a_mutation_the_runbook_relies_on_fails_the_job_and_the_summary_shows_its_line(repo, tmp_path):
    path = repo / NEW
    text = path.read_text()
    assert text.count("LONG_TIER_ONLY=${LONG_TIER_ONLY:-true}") == 1
    path.write_text(text.replace("LONG_TIER_ONLY=${LONG_TIER_ONLY:-true}", "LONG_TIER_ONLY=${LONG_TIER_ONLY:-false}"))
    _git(repo, "commit", "-q", "-am", "dual-role by default")
    r, summary = _preview(repo, tmp_path)
    assert r.returncode == 1, r.stderr
    line = (f"{NEW}: model-proxy-registrar: environment LONG_TIER_ONLY: found false, expected true (the verify gate requires "
            f"gpu02 under the long domain only, attached through the synthetic id; relied on by "
            f"runbooks/gpu02-glm53-w4afp8-long-context.yaml:")
    assert line in r.stderr and line in summary
    # every runbook deploying the file relies on it (the canaries too): none matches, all are listed
    assert summary.count("(**mismatch**)") == 4


def test_a_change_for_another_runbook_of_the_same_file_passes_and_names_the_others(repo, tmp_path):
    # the pdi-2 canary's revision of the file (#299): it matches that runbook, not #294's
    shutil.copy(SIM_FILES / "tags" / "v0.0.304" / NEW, repo / NEW)
    _git(repo, "commit", "-q", "-am", "pdi 2 on r2")
    r, summary = _preview(repo, tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"### `{NEW}` — runbook `gpu02-glm53-w4afp8-pdi2-canary` (checked)" in summary
    assert f"### `{NEW}` — runbook `gpu02-glm53-w4afp8-long-context` (**another revision**" in summary
    assert "--prefill-decode-interval: found 2, expected 1" in summary  # #294's runbook's difference, shown
    assert "mismatch:" not in r.stderr
