"""scripts/relayout.py (issue 26): the table places every module of orchestrator/, and the tool
moves, rewrites and stops as it says, on a small tree of its own."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                                reason="needs git and a git checkout (the tracked files)")


def _tool():
    spec = importlib.util.spec_from_file_location("relayout", ROOT / "scripts" / "relayout.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["relayout"] = mod
    spec.loader.exec_module(mod)
    return mod


relayout = _tool()


def test_the_table_places_every_module_of_the_package():
    """A module someone adds at the top of orchestrator/ needs a line in scripts/relayout_table.toml."""
    table = relayout.Table.load(relayout.TABLE)
    plan = relayout.make_plan(ROOT, table)
    assert plan.unmapped == [] and plan.collisions == []


TOY_TABLE = '''
package = "toypkg"
[packages]
"toypkg.low" = "Pure helpers."
"toypkg.layer" = "A layer."
[move]
"toypkg.old" = "toypkg.low.helpers"
"toypkg.pkg" = "toypkg.layer.pkg"
[keep]
modules = ["toypkg.user"]
[rewrite]
exclude = ["table.toml"]
keep_patterns = ['get_logger\\("[^"]*"\\)']
'''

TOY = {
    "toypkg/__init__.py": "",
    "toypkg/old.py": "X = 1\n",
    "toypkg/pkg/__init__.py": "from toypkg.pkg.inner import Y  # noqa\n",
    "toypkg/pkg/inner.py": "from ..old import X\nfrom . import sib\nY = X + sib.Z\n",
    "toypkg/pkg/sib.py": "Z = 1\n",
    "toypkg/user.py": ("import logging\nfrom toypkg import old, pkg as p\nimport toypkg.old as o\n"
                       "TARGET = 'toypkg.old.X'\nPATTERN = r'toypkg\\.old'\nLOG = logging.getLogger('toypkg.old')\n"
                       "def get_logger(name): return name\nNAME = get_logger(\"toypkg.old\")\n"
                       "VALUE = old.X + p.Y + o.X\n"),
    "docs.md": "See toypkg/old.py and toypkg/pkg/ (not /etc/toypkg/old.yaml), `python -m toypkg.old`.\n",
    "pyproject.toml": '[tool.setuptools]\npackages = [\n    "toypkg", "toypkg.pkg",\n]\n',
    ".importlinter": "[importlinter]\nroot_packages =\n    toypkg\n",
}


def _toy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for rel, text in TOY.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (tmp_path / "table.toml").write_text(TOY_TABLE)
    for cmd in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "toy"]):
        subprocess.run(["git", "-C", str(root), *cmd], check=True, capture_output=True)
    return root


def _run(root: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "relayout.py"), "--root", str(root),
                           "--table", str(tmp_path / "table.toml"), *extra], capture_output=True, text=True, timeout=60)


def _value(root: Path) -> str:
    return subprocess.run([sys.executable, "-c", "import toypkg.user as u; print(u.VALUE, u.TARGET, u.PATTERN, u.NAME)"],
                          cwd=root, capture_output=True, text=True, timeout=60).stdout.strip()


def test_a_tree_is_moved_rewritten_and_left_alone_the_second_time(tmp_path):
    root = _toy(tmp_path)
    assert _value(root) == r"4 toypkg.old.X toypkg\.old toypkg.old"
    dry = _run(root, tmp_path, "--dry-run")
    assert dry.returncode == 0 and "toypkg.old" in dry.stdout and not (root / "toypkg/low").exists()
    res = _run(root, tmp_path)
    assert res.returncode == 0, res.stderr
    assert not (root / "toypkg/old.py").exists() and (root / "toypkg/low/helpers.py").exists()
    assert (root / "toypkg/layer/pkg/inner.py").exists() and not (root / "toypkg/pkg").exists()
    assert (root / "toypkg/low/__init__.py").read_text() == '"""Pure helpers."""\n'
    # every kind of reference follows, the package still works, logger names stay
    assert _value(root) == r"4 toypkg.low.helpers.X toypkg\.low\.helpers toypkg.old"
    user = (root / "toypkg/user.py").read_text()
    assert "from toypkg.low import helpers as old\nfrom toypkg.layer import pkg as p\n" in user
    assert "import toypkg.low.helpers as o\n" in user and "getLogger('toypkg.low.helpers')" in user
    inner = (root / "toypkg/layer/pkg/inner.py").read_text()
    assert inner.startswith("from toypkg.low.helpers import X\nfrom . import sib\n"), inner
    assert (root / "docs.md").read_text() == ("See toypkg/low/helpers.py and toypkg/layer/pkg/ (not /etc/toypkg/old.yaml), "
                                              "`python -m toypkg.low.helpers`.\n")
    assert '"toypkg.layer", "toypkg.layer.pkg", "toypkg.low"' in (root / "pyproject.toml").read_text()
    assert "[importlinter:contract:layers]" in (root / ".importlinter").read_text()
    # idempotent: a second run finds nothing to move and changes nothing
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "moved"], check=True)
    again = _run(root, tmp_path)
    assert again.returncode == 0, again.stderr
    assert "0 modules move" in again.stdout
    assert subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True).stdout == ""


def test_a_module_the_table_does_not_place_fails_the_run(tmp_path):
    root = _toy(tmp_path)
    (root / "toypkg/stray.py").write_text("")
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "stray"], check=True)
    for extra in ((), ("--dry-run",)):
        res = _run(root, tmp_path, *extra)
        assert res.returncode == 2 and "toypkg/stray.py" in res.stderr, res.stderr
    assert (root / "toypkg/old.py").exists()


def test_a_move_onto_an_existing_module_fails_the_run(tmp_path):
    root = _toy(tmp_path)
    (root / "toypkg/low").mkdir()
    (root / "toypkg/low/__init__.py").write_text("")
    (root / "toypkg/low/helpers.py").write_text("")
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "clash"], check=True)
    res = _run(root, tmp_path)
    assert res.returncode == 2 and "toypkg/old.py -> toypkg/low/helpers.py" in res.stderr, res.stderr
