"""The architecture contracts in `.importlinter` hold: the pure core (machine, plan, runbook,
steps, log gate, follower, parsers, budget) imports no httpx, asyncio or journal; only the demo
imports the simulator; the simulator never imports the orchestrator's clients or executor."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _lint_imports() -> subprocess.CompletedProcess[str]:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert exe, "import-linter is part of the test extra"
    return subprocess.run([exe, "--config", str(ROOT / ".importlinter")], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_contracts_are_kept():
    res = _lint_imports()
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    declared = (ROOT / ".importlinter").read_text().count("[importlinter:contract:")
    assert declared >= 3 and f"{declared} kept, 0 broken" in res.stdout, res.stdout[-3000:]


def test_a_broken_contract_is_reported(tmp_path):
    """The check can fail: a copy of the config that forbids what plan really imports is broken."""
    cfg = (ROOT / ".importlinter").read_text().replace("    orchestrator_sim\n\n[importlinter:contract:sim-only-from-demo]",
                                                       "    orchestrator_sim\n    orchestrator.language.runbook\n\n[importlinter:contract:sim-only-from-demo]")
    bad = tmp_path / "importlinter.ini"
    bad.write_text(cfg)
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    res = subprocess.run([exe, "--config", str(bad)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "BROKEN" in res.stdout
