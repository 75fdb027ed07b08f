"""The repository stands on its own (issue 22): a fresh clone with nothing beside it tests exactly
what CI tests, and every tracked file is there for a reason.

- No tracked file refers to a path outside the checkout: the specification folder beside it
  (the parent directory's specification folder), the machine's work tree, a home directory, or a `Path(__file__).parents[N]` that
  climbs above the repository root. What tests read is carried in `tests/data/`.
- No tracked file is one that no build, test or reader can reach: each is a Python module of a
  package or test tree, a file a tool reads by its fixed name, package data the wheel ships, or a
  file another tracked file names (by path, by name, or by its folder). A stray debugging output
  (the committed `rbfp8.out` that started this) fails here.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import tomllib
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[2]
ME = "tests/core/test_repository_hygiene.py"

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a git checkout (the tracked files)"
)

# The patterns are spelled in pieces so this file does not match itself.
_DOTDOT = r"\.\./"
OUTSIDE = [
    (re.compile(r"(?:" + _DOTDOT + r")+shared\b"), "the specification folder beside the checkout"),
    (re.compile(r"(?<![\w.~-])/" + r"work/"), "the machine's work tree"),
    (re.compile(r"(?<![\w.~-])/(?:home|Users)/(?!orchestrator\b)[\w.-]+/"), "a home directory"),
    (re.compile(r"(?:^|[\s\"'(=])~/(?!\.config/orchestrator|\.local/state/orchestrator)[\w.-]+/[\w.-]"), "a file in someone's home"),
]
#: Path(__file__)....parents[N]: how far it climbs, checked against the file's depth.
PARENTS = re.compile(r"Path\(__file__\)(?:\.resolve\(\))?\.parents\[(\d+)\]")
#: Where a container path (not this machine's) is the point: the image's own filesystem.
CONTAINER_FILES = {"Dockerfile"}

#: Files a tool reads by their fixed name.
TOOL_FILES = {".gitignore", ".dockerignore", ".importlinter", "Makefile", "Dockerfile", "pyproject.toml", "README.md",
              "requirements.lock", "LICENSE"}
#: Trees whose Python modules are imported or collected (packages, the test suite, bench, scripts).
PYTHON_ROOTS = ("orchestrator/", "orchestrator_sim/", "tests/", "bench/", "scripts/")


def tracked() -> list[str]:
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p and (ROOT / p).exists()]


def text_of(path: str) -> str | None:
    try:
        return (ROOT / path).read_text(encoding="utf-8")
    except (UnicodeDecodeError, IsADirectoryError):
        return None


def outside_references(path: str, text: str) -> list[str]:
    found = []
    if path not in CONTAINER_FILES:
        for lineno, line in enumerate(text.splitlines(), 1):
            for pattern, what in OUTSIDE:
                if m := pattern.search(line):
                    found.append(f"{path}:{lineno}: {m.group(0)!r} ({what})")
    depth = len(PurePosixPath(path).parts) - 1  # parents[depth] is the repository root
    for m in PARENTS.finditer(text):
        if int(m.group(1)) > depth:
            lineno = text.count("\n", 0, m.start()) + 1
            found.append(f"{path}:{lineno}: {m.group(0)} climbs above the repository root")
    return found


def package_data_globs() -> list[str]:
    """pyproject's package-data, as repository-relative globs (what the build reads)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = {pkg: pkg.replace(".", "/") for pkg in config.get("package-data", {})}
    dirs.update(config.get("package-dir", {}))
    globs = []
    for pkg, patterns in config.get("package-data", {}).items():
        for pattern in patterns:
            globs.append(f"{dirs[pkg]}/{pattern}")
            globs.append(f"{dirs[pkg]}/{pattern.replace('**/', '')}")
    for _target, sources in config.get("data-files", {}).items():
        globs.extend(sources)
    return globs


def unread(files: list[str], texts: dict[str, str]) -> list[str]:
    globs = package_data_globs()
    found = []
    for path in files:
        p = PurePosixPath(path)
        if path in TOOL_FILES or p.name in TOOL_FILES or path.startswith(".ci/"):
            continue
        if p.suffix == ".py" and path.startswith(PYTHON_ROOTS):
            continue
        if any(fnmatch.fnmatch(path, g) for g in globs):
            continue
        # this file's own examples name no real file
        others = [t for other, t in texts.items() if other not in (path, ME)]
        names = [path, p.name] + ([f"{p.parent}/", f'"{p.parent.name}"'] if p.parent.name else [])
        if p.suffix == ".py":
            names.append(".".join(p.with_suffix("").parts))
        if any(name in t for t in others for name in names):
            continue
        found.append(path)
    return found


def test_no_tracked_file_refers_to_a_path_outside_the_repository():
    found = [hit for path in tracked() if path != ME and (text := text_of(path)) for hit in outside_references(path, text)]
    assert found == [], "tracked files refer to paths outside the repository:\n" + "\n".join(found)


def test_the_outside_reference_check_catches_each_kind():
    spec = "sha" + "red"  # the folder's name, never spelled whole here (this file would match itself)
    shared = "." + "./" + spec + "/reference/x.md"
    assert outside_references("README.md", f"see {shared}")
    assert outside_references("tests/core/t.py", 'Path("/' + 'work/' + spec + '/reference/a.yaml")')
    assert outside_references("tests/core/t.py", "Path(__file__).resolve().parents[3] / " + "'sha" + "red'")
    assert outside_references("tests/t.py", "Path(__file__).parents[2]")
    assert outside_references("scripts/x.sh", "cat /home/" + "alice/notes")
    # inside the repository or another system's own paths: fine
    assert not outside_references("tests/core/t.py", "Path(__file__).resolve().parents[2] / 'tests' / 'data'")
    assert not outside_references("orchestrator_sim/host/containers.py", 'CONFIG_DIR = "/app/work"')
    assert not outside_references("README.md", "~/.config/orchestrator/hosts.yaml")


def test_every_tracked_file_is_read_by_a_build_a_test_or_a_reader():
    files = tracked()
    texts = {path: t for path in files if (t := text_of(path)) is not None}
    found = unread(files, texts)
    assert found == [], "tracked files that no build, test or document reads (delete them or name them):\n" + "\n".join(found)


def test_the_unread_file_check_catches_a_stray_output():
    files = tracked()
    texts = {path: t for path in files if (t := text_of(path)) is not None}
    stray = "rbfp8.out"
    texts[stray] = "python: can't open file\n"
    assert unread([stray, "rb_fp8.py", "README.md", "tests/core/golden/plan-base.text.txt"], texts) == [stray, "rb_fp8.py"]
