"""The state diagram (orchestrator/previews/diagram.py) is generated from the transition table.

Golden files pin the gpu02 rollout's Mermaid and dot output; regenerate after an intended runbook
change with `ORCHESTRATOR_UPDATE_GOLDEN=1 pytest tests/core/test_diagram.py`, then `make diagram`
for docs/design.md, and review the diff.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.language.machine import TERMINALS, compile_rollback, compile_rollout
from orchestrator.language.runbook import load_runbook
from orchestrator.previews.diagram import render_dot, render_mermaid

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"


def _check(name: str, produced: str) -> None:
    path = GOLDEN / name
    if os.environ.get("ORCHESTRATOR_UPDATE_GOLDEN") == "1":
        path.write_text(produced)
    assert produced == path.read_text(), f"{name} changed: review it, then regenerate (see the module docstring)"


def test_mermaid_of_the_gpu02_rollout_is_byte_identical():
    _check("diagram-gpu02.mermaid.txt", render_mermaid(compile_rollout(load_runbook())))


def test_dot_of_the_gpu02_rollout_is_byte_identical():
    _check("diagram-gpu02.dot.txt", render_dot(compile_rollout(load_runbook())))


def test_a_runbook_change_changes_the_diagram():
    """A step added to r2 appears as a state with its arrows: the diagram follows the runbook."""
    rb = load_runbook()
    r2 = rb.phases[0]
    extra = r2.steps[-1].model_copy(update={"id": "extra-soak"})
    changed = rb.model_copy(update={"phases": [r2.model_copy(update={"steps": [*r2.steps, extra]}), *rb.phases[1:]]})
    out = render_mermaid(compile_rollout(changed))
    assert out != (GOLDEN / "diagram-gpu02.mermaid.txt").read_text()
    assert f'["{r2.name}.extra-soak"]' in out


def test_every_state_and_edge_of_the_table_is_drawn():
    table = compile_rollout(load_runbook())
    out = render_mermaid(table)
    labels = dict(re.findall(r'^  (s\d+|[A-Z_]+)\[?\(?\[?"([^"]+)"', out, re.M))
    ids = {label: nid for nid, label in labels.items()}
    assert set(table.order) <= set(ids)
    arrows = re.findall(r"^  (\S+) -->\|([^|]+)\| (\S+)$", out, re.M)
    drawn = {(src, ev.strip(), dst) for src, evs, dst in arrows for ev in evs.split(",")}
    for (state, event), to in table.edges.items():
        assert (ids[state], event.value, ids.get(to, to)) in drawn, (state, event, to)
    assert len(drawn) == len(table.edges)
    for t in TERMINALS:
        if t in table.edges.values():
            assert f"class {t} t_{t}" in out  # terminal states are styled


def test_the_current_state_is_highlighted():
    table = compile_rollout(load_runbook())
    state = table.order[7]
    out = render_mermaid(table, current=state)
    nid = re.search(rf'^  (s\d+)\["{re.escape(state)}"\]', out, re.M).group(1)
    assert out.rstrip().endswith(f"class {nid} current")
    assert "current" not in render_mermaid(table)


def test_rollback_table_renders():
    rb = load_runbook()
    out = render_dot(compile_rollback(rb, rb.rollback_replicas("all")))
    assert out.startswith('digraph "rollback"') and '"ROLLED_BACK" [shape=doubleoctagon' in out


def test_the_readme_embeds_the_generated_diagram():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from update_readme_diagram import readme_block
    finally:
        sys.path.pop(0)
    assert readme_block() in (ROOT / "docs" / "design.md").read_text(), "docs/design.md's diagram is stale: run `make diagram`"


@pytest.mark.parametrize("fmt,head", [("mermaid", "flowchart TD"), ("dot", 'digraph "rollout"')])
def test_plan_format_through_the_cli(fmt, head):
    exe = Path(sys.executable).parent / "orchestrate"
    r = subprocess.run([str(exe), "plan", "gpu02", "--tag", "v0.0.300", "--format", fmt], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(head)
    assert r.stdout == (GOLDEN / f"diagram-gpu02.{fmt}.txt").read_text()


def test_mermaid_of_the_base_tier_rollout_shows_the_remedy_edges():
    table = compile_rollout(load_runbook("base-glm53-w4afp8"))
    out = render_mermaid(table)
    _check("diagram-base.mermaid.txt", out)
    ids = {label: sid for sid, label in re.findall(r'^  (s\d+)\["([^"]+)"\]$', out, re.M)}
    gate, first, last = "switch.cold-start-r1", "switch.cold-start-r1.remedy.stop-r1", "switch.cold-start-r1.remedy.start-r1"
    assert f"  {ids[gate]} -->|remedy| {ids[first]}" in out
    assert f"  {ids[last]} -->|ok| {ids[gate]}" in out
    assert "classDef remedy" in out
