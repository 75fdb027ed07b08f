"""The caches behind `status` and `plan` (issue 25) give what the command would compute: the same
text from the cache as without it; a changed runbook, inventory or module misses; a corrupt cache
is ignored and rewritten; a failed plan is never kept; a read-only state dir is no error."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from orchestrator.util import result_cache

ROOT = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path, inventory: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env.update(ORCHESTRATOR_STATE_DIR=str(tmp_path / "state"),
               ORCHESTRATOR_INVENTORY=str(inventory or ROOT / "config" / "hosts.yaml"))
    return env


def _orchestrate(tmp_path: Path, *argv: str, inventory: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *argv], cwd=tmp_path, env=_env(tmp_path, inventory),
                          capture_output=True, text=True, timeout=120)


def _cached(tmp_path: Path, kind: str) -> list[Path]:
    d = tmp_path / "state" / "cache"
    return sorted(d.glob(f"{kind}-*")) if d.is_dir() else []


def _journal(tmp_path: Path) -> None:
    from orchestrator.hosts.redaction import Redactor
    from orchestrator.journal import open_journal

    (tmp_path / "state").mkdir(exist_ok=True)
    j = open_journal(str(tmp_path / "state" / "journal.sqlite3"), redactor=Redactor())
    try:
        j.create_run(host="gpu02", runbook="gpu02-glm53-w4afp8-long-context", tag="v0.0.300", kind="rollout",
                     state="preflight", context={})
    finally:
        j.close()


def test_plan_from_the_cache_is_the_plan_and_a_corrupt_cache_is_ignored(tmp_path):
    first = _orchestrate(tmp_path, "plan", "gpu02", "--tag", "v0.0.300")
    assert first.returncode == 0 and len(_cached(tmp_path, "plan")) == 1
    again = _orchestrate(tmp_path, "plan", "gpu02", "--tag", "v0.0.300")
    assert (again.returncode, again.stdout, again.stderr) == (0, first.stdout, first.stderr)
    other_tag = _orchestrate(tmp_path, "plan", "gpu02", "--tag", "v0.0.301")
    assert other_tag.returncode == 0 and "v0.0.301" in other_tag.stdout and len(_cached(tmp_path, "plan")) == 2
    for p in _cached(tmp_path, "plan"):
        p.write_bytes(b"\xff\xfe not a plan")
    broken = _orchestrate(tmp_path, "plan", "gpu02", "--tag", "v0.0.300")
    assert broken.returncode == 0  # undecodable: computed afresh
    assert broken.stdout == first.stdout


def test_plan_misses_when_the_inventory_or_a_runbook_changes(tmp_path):
    inv = tmp_path / "hosts.yaml"
    shutil.copy(ROOT / "config" / "hosts.yaml", inv)
    rb = tmp_path / "rb.yaml"
    shutil.copy(ROOT / "runbooks" / "gpu02-glm53-w4afp8-long-context.yaml", rb)
    first = _orchestrate(tmp_path, "plan", "gpu02", "--tag", "v0.0.300", "--runbook", str(rb), inventory=inv)
    assert first.returncode == 0, first.stderr
    rb.write_text(rb.read_text().replace("Stop the old FP8 r2", "Stop the OLD r2 (changed)"))
    changed = _orchestrate(tmp_path, "plan", "gpu02", "--tag", "v0.0.300", "--runbook", str(rb), inventory=inv)
    assert changed.returncode == 0 and "Stop the OLD r2 (changed)" in changed.stdout
    inv.write_text(inv.read_text() + "\n# a comment\n")
    _orchestrate(tmp_path, "plan", "gpu02", "--tag", "v0.0.300", "--runbook", str(rb), inventory=inv)
    assert len(_cached(tmp_path, "plan")) == 3  # one per inputs
    rb.write_text("not: [a runbook")
    bad = _orchestrate(tmp_path, "plan", "gpu02", "--tag", "v0.0.300", "--runbook", str(rb), inventory=inv)
    assert bad.returncode == 2 and "not valid YAML" in bad.stderr and len(_cached(tmp_path, "plan")) == 3


def test_a_failed_plan_is_not_kept(tmp_path):
    r = _orchestrate(tmp_path, "plan", "gpu99", "--tag", "v0.0.300")
    assert r.returncode == 2
    assert _cached(tmp_path, "plan") == []


def test_status_from_the_cache_is_the_same_and_a_corrupt_cache_is_ignored(tmp_path):
    _journal(tmp_path)
    first = _orchestrate(tmp_path, "status")
    assert first.returncode == 0 and "[ ] preflight.read-env:" in first.stdout
    (cached,) = _cached(tmp_path, "steps")
    assert _orchestrate(tmp_path, "status").stdout == first.stdout
    cached.write_text('[["preflight.read-env", "preflight"]]')  # not the cached form: ignored
    assert _orchestrate(tmp_path, "status").stdout == first.stdout
    cached.write_text("{")
    assert _orchestrate(tmp_path, "status").stdout == first.stdout


def test_the_key_changes_with_the_code(tmp_path, monkeypatch):
    before = result_cache.key_of(b"x")
    monkeypatch.setattr(result_cache, "code_fingerprint", lambda: "another version of the code")
    assert result_cache.key_of(b"x") != before
    assert result_cache.key_of(b"ab", b"c") != result_cache.key_of(b"a", b"bc")


def test_a_module_changed_in_place_changes_the_fingerprint(tmp_path, monkeypatch):
    pkg = tmp_path / "orchestrator"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text("x = 1\n")
    import orchestrator

    monkeypatch.setattr(orchestrator, "__file__", str(pkg / "__init__.py"))
    first = result_cache.code_fingerprint()
    (pkg / "m.py").write_text("x = 22\n")
    assert result_cache.code_fingerprint() != first


def test_a_cache_that_cannot_be_written_is_no_error(tmp_path):
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "cache").write_text("a file where the cache folder would be")
    r = _orchestrate(tmp_path, "plan", "gpu02", "--tag", "v0.0.300")
    assert r.returncode == 0 and "v0.0.300" in r.stdout and r.stderr == ""


def test_write_keeps_at_most_keep_files(tmp_path, monkeypatch):
    monkeypatch.setattr(result_cache, "KEEP", 3)
    for i in range(6):
        result_cache.write(result_cache.cache_path(tmp_path, "plan", f"k{i}", ".txt"), str(i))
        os.utime(result_cache.cache_path(tmp_path, "plan", f"k{i}", ".txt"), ns=(i * 10**9, i * 10**9))
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["plan-k3.txt", "plan-k4.txt", "plan-k5.txt"]
