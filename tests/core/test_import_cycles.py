"""No import circle in the package or the simulator (issue 26).

A circle is a set of modules that import each other, directly or through others. Imports made
only for type annotations (`if TYPE_CHECKING:`) count too: two modules that each need the other
to be read are one module cut in two (`executor/runtime.py` <-> `steps/base.py` and the
simulator's `compose_ops.py` <-> `host_core.py` were such circles). The graph is grimp's, the one
import-linter checks `.importlinter` with.

KNOWN lists the circles that remain today, each with whoever takes it apart; the list only
shrinks: the test fails on a circle not listed, and on a listed one that is gone.
"""

from __future__ import annotations

import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("orchestrator", "orchestrator_sim")

#: The circles of today, by their modules. Take one off when it is broken.
KNOWN: list[set[str]] = [
    # (admission <-> incident <-> runner was taken apart: the session and the journal's refusals
    # they all need now sit below them, in service/session.py and service/refusals.py)
]


def circles(*packages: str) -> list[set[str]]:
    """The import circles among `packages`' modules (strongly connected components of more than one module)."""
    graph = grimp.build_graph(*packages, cache_dir=None, exclude_type_checking_imports=False)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & graph.modules) for m in sorted(graph.modules)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(root: str) -> None:  # Tarjan's algorithm, iterative (no recursion limit)
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            for j in range(i, len(edges[node])):
                nxt = edges[node][j]
                if nxt not in index:
                    work.append((node, j + 1))
                    work.append((nxt, 0))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                if low[node] == index[node]:
                    comp = set()
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.add(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        found.append(comp)
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])

    for module in edges:
        if module not in index:
            visit(module)
    return sorted(found, key=sorted)


def test_no_import_circle():
    found = circles(*PACKAGES)
    new = [sorted(c) for c in found if c not in KNOWN]
    gone = [sorted(c) for c in KNOWN if c not in found]
    assert not new, f"import circles: {new}: move what both need below both (issue 26)"
    assert not gone, f"no longer a circle (take it off KNOWN): {gone}"


def test_a_circle_is_found(tmp_path, monkeypatch):
    """The check can fail: a package whose modules import each other (one only for annotations)."""
    pkg = tmp_path / "circled"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from circled.b import B\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from circled.c import C\nB = 1\n")
    (pkg / "c.py").write_text("import circled.a\nC = 1\n")
    (pkg / "d.py").write_text("import circled.a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("circled", None)
    assert circles("circled") == [{"circled.a", "circled.b", "circled.c"}]
