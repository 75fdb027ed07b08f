"""Arrange orchestrator/ by layer (issue 26), from the table in scripts/relayout_table.toml.

    python scripts/relayout.py --dry-run     # the plan: moves, new packages, files rewritten
    python scripts/relayout.py               # do it (git mv + rewrites), then commit

What it does, in this order:
1. Checks the table covers every module of orchestrator/: each is moved ([move]), kept ([keep])
   or already inside a layer package ([packages]). A module it cannot place fails the run, named
   (a module someone added since the table was written: give it a line in the table).
2. Moves the files with `git mv` (a package moves with everything in it) and creates the layer
   packages' `__init__.py`. A module already at its new place is skipped, so the tool can run
   again after a rebase brings code that still names the old modules.
3. Rewrites every reference to a moved module in every tracked text file: imports (absolute,
   relative and `from package import module`), dotted names in strings (mock.patch, monkeypatch,
   importlib, `python -m`, .importlinter, pyproject), regex-escaped dotted names, and paths
   (`orchestrator/runner.py`, `orchestrator/executor/`) in docs, Makefile, Dockerfile and scripts.
4. Lists every package in pyproject's [tool.setuptools] packages, and installs the layers
   contract (scripts/relayout_layers.ini) into .importlinter.

Afterwards: `.venv/bin/lint-imports`, the tests, then `git add -A && git commit`; README's "Where
things are" section draws the resulting tree.

The table's [move] entries whose module is gone are skipped (already moved, or taken apart by
someone else); a move onto a file that exists fails the run, naming both.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE = Path(__file__).with_name("relayout_table.toml")
LAYERS = Path(__file__).with_name("relayout_layers.ini")
PACKAGE = "orchestrator"


class RelayoutError(Exception):
    """A table or tree the tool refuses to act on; the message says why."""


@dataclass
class Table:
    package: str
    move: dict[str, str]
    keep: set[str]
    packages: dict[str, str]
    exclude: list[str]
    keep_patterns: list[re.Pattern[str]]

    @classmethod
    def load(cls, path: Path) -> "Table":
        data = tomllib.loads(path.read_text())
        rewrite = data.get("rewrite", {})
        t = cls(data.get("package", PACKAGE), dict(data.get("move", {})), set(data.get("keep", {}).get("modules", [])),
                dict(data.get("packages", {})), list(rewrite.get("exclude", [])),
                [re.compile(p) for p in rewrite.get("keep_patterns", [])])
        t.validate()
        return t

    def validate(self) -> None:
        for old, new in self.move.items():
            for name in (old, new):
                if not name.startswith(self.package + ".") or not all(p.isidentifier() for p in name.split(".")):
                    raise RelayoutError(f"table: {name!r} is not a module of {self.package}")
            if old == new:
                raise RelayoutError(f"table: {old} moves to itself: list it under [keep]")
            for other in self.move:  # a new name that starts with an old one would be rewritten again
                if new == other or new.startswith(other + "."):
                    raise RelayoutError(f"table: {old} -> {new} lands inside {other}, which itself moves")
        targets = sorted(self.move.values())
        if len(set(targets)) != len(targets):
            raise RelayoutError("table: two modules move to the same place: "
                                + ", ".join(sorted({t for t in targets if targets.count(t) > 1})))

    def key_for(self, module: str) -> str | None:
        """The longest [move] key that is `module` or one of its packages."""
        best = None
        for key in self.move:
            if (module == key or module.startswith(key + ".")) and (best is None or len(key) > len(best)):
                best = key
        return best

    def new_name(self, module: str) -> str:
        key = self.key_for(module)
        return module if key is None else self.move[key] + module[len(key):]

    def placed(self, module: str) -> bool:
        """Kept, or inside a layer package: already where it belongs."""
        homes = self.keep | set(self.packages) | set(self.move.values())
        return any(module == h or module.startswith(h + ".") for h in homes)


# -- the tree ---------------------------------------------------------------------------------------

def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def module_of(rel: str) -> str:
    """`orchestrator/executor/loop.py` -> `orchestrator.executor.loop`; a package's __init__ -> the package."""
    parts = rel[:-3].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def path_of(module: str, is_package: bool) -> str:
    return module.replace(".", "/") + ("/__init__.py" if is_package else ".py")


def tracked(root: Path) -> list[str]:
    return [p for p in git(root, "ls-files", "-z").split("\0") if p and (root / p).is_file()]


@dataclass
class Plan:
    moves: list[tuple[str, str]] = field(default_factory=list)  # (old path, new path), every tracked file
    skipped: list[str] = field(default_factory=list)  # [move] entries with nothing left to move
    new_packages: list[str] = field(default_factory=list)  # __init__.py paths to create
    unmapped: list[str] = field(default_factory=list)
    collisions: list[str] = field(default_factory=list)


def make_plan(root: Path, table: Table) -> Plan:
    plan = Plan()
    files = tracked(root)
    for rel in files:
        if not rel.startswith(table.package + "/"):
            continue
        if rel.endswith(".py"):
            module = module_of(rel)
        else:  # a data file moves with its folder's package (nearest enclosing module name)
            module = ".".join(rel.split("/")[:-1])
        key = table.key_for(module)
        if key is None:
            if module != table.package and not table.placed(module) and rel.endswith(".py"):
                plan.unmapped.append(rel)
            continue
        new = table.new_name(module)
        if rel.endswith(".py"):
            new_rel = path_of(new, rel.endswith("/__init__.py"))
        else:
            new_rel = new.replace(".", "/") + "/" + rel.rsplit("/", 1)[1]
        if (root / new_rel).exists():
            plan.collisions.append(f"{rel} -> {new_rel}: the destination exists")
        plan.moves.append((rel, new_rel))
    moved_keys = {table.key_for(module_of(o)) for o, _ in plan.moves if o.endswith(".py")}
    plan.skipped = sorted(k for k in table.move if k not in moved_keys)
    for pkg in sorted(table.packages):
        init = path_of(pkg, True)
        if not (root / init).exists():
            plan.new_packages.append(init)
    return plan


# -- rewriting ------------------------------------------------------------------------------------

class Rewriter:
    """Every way a file names a moved module, old -> new."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.package = pkg = table.package
        keys = sorted(table.move, key=len, reverse=True)
        tails = [re.escape(k[len(pkg) + 1:]) for k in keys]
        alt = "|".join(tails)
        # dotted: orchestrator.runner, orchestrator.executor.loop (not orchestrator_sim, not a.orchestrator.x)
        self.dotted = re.compile(rf"(?<![\w.]){pkg}\.({alt})(?![\w])")
        # regex-escaped: orchestrator\.healthcheck
        esc = "|".join(t.replace(r"\.", r"\\\.") for t in tails)
        self.escaped = re.compile(rf"(?<![\w.]){pkg}\\\.({esc})(?![\w])")
        # paths: orchestrator/runner.py, orchestrator/executor/ (not /etc/orchestrator/...: no key there)
        paths = "|".join(re.escape(k[len(pkg) + 1:].replace(".", "/")) for k in keys)
        self.paths = re.compile(rf"(?<![\w.~-]){pkg}/({paths})(?=\.py\b|/|\.(?!\w)|[^\w./-]|$)", re.M)

    def _dotted(self, m: re.Match[str]) -> str:
        return self.table.new_name(f"{self.package}.{m.group(1)}")

    def _escaped(self, m: re.Match[str]) -> str:
        return self.table.new_name(f"{self.package}.{m.group(1).replace(chr(92) + '.', '.')}").replace(".", "\\.")

    def _path(self, m: re.Match[str]) -> str:
        return self.table.new_name(f"{self.package}.{m.group(1).replace('/', '.')}").replace(".", "/")

    def text(self, text: str) -> str:
        protected: dict[str, str] = {}

        def protect(m: re.Match[str]) -> str:
            token = f"\0{len(protected)}\0"
            protected[token] = m.group(0)
            return token

        for pat in self.table.keep_patterns:
            text = pat.sub(protect, text)
        text = self.dotted.sub(self._dotted, text)
        text = self.escaped.sub(self._escaped, text)
        text = self.paths.sub(self._path, text)
        for token, original in protected.items():
            text = text.replace(token, original)
        return text

    def imports(self, source: str, old_module: str, new_module: str, is_package: bool) -> str:
        """`from X import name` where X.name is a moved module, and relative imports: rewritten to
        absolute imports of the new names (the dotted pass does the rest)."""
        try:
            tree = ast.parse(source)
        except SyntaxError:
            return source
        lines = source.splitlines(keepends=True)
        edits: list[tuple[ast.ImportFrom, str]] = []
        old_pkg = old_module if is_package else old_module.rpartition(".")[0]
        new_pkg = new_module if is_package else new_module.rpartition(".")[0]
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = old_pkg.split(".")
                base = base[: len(base) - (node.level - 1)]
                absolute = ".".join(base + ([node.module] if node.module else []))
            else:
                absolute = node.module or ""
            if absolute != self.package and not absolute.startswith(self.package + "."):
                continue
            groups: dict[str, list[str]] = {}
            changed = bool(node.level)
            for alias in node.names:
                full = f"{absolute}.{alias.name}"
                if full in self.table.move:
                    new_full = self.table.new_name(full)
                    parent, _, name = new_full.rpartition(".")
                    local = alias.asname or alias.name
                    changed = True
                    groups.setdefault(parent, []).append(name if name == local else f"{name} as {local}")
                else:
                    groups.setdefault(self.table.new_name(absolute), []).append(
                        alias.name if not alias.asname else f"{alias.name} as {alias.asname}")
            if not changed:
                continue
            if node.level and len(groups) == 1:  # keep a relative import that still points at the same place
                (parent,) = groups
                base = new_pkg.split(".")
                base = base[: len(base) - (node.level - 1)]
                if ".".join(base + ([node.module] if node.module else [])) == parent:
                    continue
            indent = " " * node.col_offset
            stmt = ("\n" + indent).join(f"from {parent} import {', '.join(names)}" for parent, names in groups.items())
            edits.append((node, stmt))
        for node, stmt in sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True):
            first, last = node.lineno - 1, node.end_lineno - 1  # type: ignore[operator]
            head = lines[first][: node.col_offset]
            tail = lines[last][node.end_col_offset:]
            lines[first: last + 1] = [head + stmt + tail]
        return "".join(lines)


def excluded(rel: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(rel, p) for p in patterns)


def update_pyproject(root: Path, package: str) -> bool:
    """Every package directory of orchestrator/ in [tool.setuptools] packages (after the dotted rewrite)."""
    path = root / "pyproject.toml"
    if not path.exists():
        return False
    text = path.read_text()
    m = re.search(r"^packages = \[\n(.*?)^\]", text, re.S | re.M)
    if not m:
        return False
    listed = re.findall(r'"([\w.]+)"', m.group(1))
    on_disk = sorted(".".join(p.parent.relative_to(root).parts) for p in (root / package).rglob("__init__.py"))
    missing = [p for p in on_disk if p not in listed]
    if not missing:
        return False
    ours = [p for p in listed if p == package or p.startswith(package + ".")]
    at = listed.index(ours[-1]) + 1 if ours else len(listed)
    names = sorted(set(ours) | set(missing), key=lambda p: (p.split(".")[1:2] == ["runbooks"], p))
    listed = names + [p for p in listed[at:] if p not in names]
    body, line = [], "   "
    for name in listed:
        item = f' "{name}",'
        if len(line) + len(item) > 100:
            body.append(line)
            line = "   "
        line += item
    body.append(line)
    path.write_text(text[: m.start(1)] + "\n".join(body) + "\n" + text[m.end(1):])
    return True


def install_layers(root: Path) -> bool:
    path = root / ".importlinter"
    if not path.exists():
        return False
    text = path.read_text()
    if "[importlinter:contract:layers]" in text:
        return False
    path.write_text(text.rstrip("\n") + "\n" + LAYERS.read_text())
    return True


# -- running -------------------------------------------------------------------------------------

def describe(plan: Plan, table: Table) -> list[str]:
    out = []
    modules = [(o, n) for o, n in plan.moves if o.endswith(".py")]
    out.append(f"{len(modules)} modules move ({len(plan.moves) - len(modules)} other files with them); "
               f"{len(plan.skipped)} table entries have nothing left to move; "
               f"{len(plan.new_packages)} packages to create")
    for init in plan.new_packages:
        out.append(f"  create {init}")
    for key in sorted(table.move, key=lambda k: (table.move[k], k)):
        if key not in plan.skipped:
            out.append(f"  {key:34} -> {table.move[key]}")
    for key in plan.skipped:
        out.append(f"  (already moved or absent) {key}")
    return out


def relayout(root: Path, table: Table, *, dry_run: bool, allow_dirty: bool = False) -> list[str]:
    plan = make_plan(root, table)
    if plan.unmapped:
        raise RelayoutError("modules the table does not place (give each a line in scripts/relayout_table.toml): "
                            + ", ".join(plan.unmapped))
    if plan.collisions:
        raise RelayoutError("moves onto existing files: " + "; ".join(plan.collisions))
    report = describe(plan, table)
    rewriter = Rewriter(table)
    files = tracked(root)
    new_of = dict(plan.moves)
    old_module_of = {new_of.get(rel, rel): module_of(rel) for rel in files if rel.endswith(".py")}
    if dry_run:
        would = [rel for rel in files if not excluded(rel, table.exclude) and _would_change(root, rel, rewriter)]
        report.append(f"{len(would)} files name a moved module and would be rewritten: " + ", ".join(would[:40])
                      + (" ..." if len(would) > 40 else ""))
        return report
    if not allow_dirty and git(root, "status", "--porcelain", "--untracked-files=no").strip():
        raise RelayoutError("the work tree has uncommitted changes: commit them first (or --allow-dirty)")
    for init in plan.new_packages:
        (root / init).parent.mkdir(parents=True, exist_ok=True)
        pkg = ".".join(Path(init).parent.parts)
        (root / init).write_text(f'"""{table.packages[pkg]}"""\n')
        git(root, "add", init)
    for old, new in plan.moves:
        (root / new).parent.mkdir(parents=True, exist_ok=True)
        git(root, "mv", old, new)
    _remove_leftovers(root, table.package, [old for old, _ in plan.moves])
    changed = 0
    for rel in tracked(root):
        if excluded(rel, table.exclude):
            continue
        path = root / rel
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        new_text = text
        if rel.endswith(".py"):
            old_module = old_module_of.get(rel, module_of(rel))
            new_text = rewriter.imports(new_text, old_module, module_of(rel), rel.endswith("__init__.py"))
        new_text = rewriter.text(new_text)
        if new_text != text:
            path.write_text(new_text, encoding="utf-8")
            changed += 1
    report.append(f"rewrote {changed} files")
    if update_pyproject(root, table.package):
        report.append("pyproject.toml: every package listed")
    if install_layers(root):
        report.append(".importlinter: the layers contract installed")
    git(root, "add", "-A", table.package, *[f for f in ("pyproject.toml", ".importlinter") if (root / f).exists()])
    return report


def _would_change(root: Path, rel: str, rewriter: Rewriter) -> bool:
    try:
        text = (root / rel).read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return False
    return rewriter.text(text) != text or (rel.endswith(".py") and rewriter.imports(
        text, module_of(rel), module_of(rel), rel.endswith("__init__.py")) != text)


def _remove_leftovers(root: Path, package: str, old_paths: list[str]) -> None:
    """The old folders git mv emptied: their __pycache__ (else Python would import an empty
    namespace package by the old name) and the folders themselves."""
    for folder in sorted({(root / p).parent for p in old_paths}, key=lambda p: len(p.parts), reverse=True):
        if not folder.is_dir() or folder == root / package:
            continue
        cache = folder / "__pycache__"
        if cache.is_dir():
            for f in cache.iterdir():
                f.unlink()
            cache.rmdir()
        if not any(folder.iterdir()):
            folder.rmdir()
    top = root / package / "__pycache__"
    if top.is_dir():  # stale bytecode of moved top-level modules
        for f in top.iterdir():
            if f.name.split(".")[0] not in {"__init__"}:
                f.unlink()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    ap.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this checkout)")
    ap.add_argument("--table", type=Path, default=TABLE)
    ap.add_argument("--allow-dirty", action="store_true", help="run over uncommitted changes")
    args = ap.parse_args(argv)
    try:
        table = Table.load(args.table)
        for line in relayout(args.root.resolve(), table, dry_run=args.dry_run, allow_dirty=args.allow_dirty):
            print(line)
    except RelayoutError as exc:
        print(f"relayout: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
