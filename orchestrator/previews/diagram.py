"""The run's state diagram, rendered from the compiled transition `Table` (Mermaid or Graphviz dot).

Rules:
- Generated from the `Table` the executor runs, never drawn by hand (golden: tests/core/test_diagram.py).
- Pure (the `.importlinter` pure-core contract), so `plan` and the server's run page both call it.
- Every state and edge appears (remedy chains included); edges between the same two states merge
  into one arrow labelled with their events (`fail, abort`): readable, nothing dropped.
- Terminals are styled by outcome; `current` (a state id) is highlighted, for a live run's page.
- Node ids are `s0`, `s1`, ... in reading order (Mermaid ids cannot hold the dots of state ids);
  the state id is the label, so the output is stable.
"""

from __future__ import annotations

from orchestrator.language.machine import TERMINALS, Event, Table

_TERMINAL_STYLE = {
    "DONE": ("#d4f7d4", "#1a7f37"),
    "ROLLED_BACK": ("#fff1c2", "#9a6700"),
    "HALTED": ("#ffd8d3", "#cf222e"),
    "ABORTED": ("#e6e6e6", "#57606a"),
}
_SECTION_STYLE = {
    "preflight": ("#eef6ff", "#0969da"),
    "forward": ("#ffffff", "#24292f"),
    "remedy": ("#eafbea", "#1a7f37"),
    "rollback": ("#fff8e6", "#9a6700"),
    "full_rollback": ("#fff8e6", "#bc4c00"),
}


def _ids(table: Table) -> dict[str, str]:
    states = list(table.order) + [t for t in TERMINALS if t not in table.order]
    return {s: (s if s in TERMINALS else f"s{i}") for i, s in enumerate(states)}


def _merged_edges(table: Table) -> list[tuple[str, str, list[str]]]:
    """(from, to, [event, ...]) in reading order of `from`, then of the first event."""
    merged: dict[tuple[str, str], list[str]] = {}
    rank = {s: i for i, s in enumerate(table.order)}
    events = list(Event)
    for (src, ev), dst in sorted(table.edges.items(),
                                 key=lambda kv: (rank.get(kv[0][0], 1 << 30), events.index(kv[0][1]))):
        merged.setdefault((src, dst), []).append(ev.value)
    return [(s, d, evs) for (s, d), evs in merged.items()]


def _used_terminals(table: Table) -> list[str]:
    targets = set(table.edges.values())
    return [t for t in TERMINALS if t in targets]


def _label(text: str) -> str:
    return text.replace('"', "'")


def render_mermaid(table: Table, *, current: str | None = None, title: str | None = None) -> str:
    """A Mermaid `flowchart` of `table` (GitHub renders it in a ```mermaid block)."""
    ids = _ids(table)
    out: list[str] = []
    if title:
        out += ["---", f"title: {_label(title)}", "---"]
    out.append("flowchart TD")
    out.append("  start((start))")
    for s in table.order:
        manual = table.nodes[s].step is not None and table.nodes[s].step.manual is not None  # type: ignore[union-attr]  # mypy does not narrow a subscripted attribute across `and`
        out.append(f'  {ids[s]}["{_label(s)}' + (" (MANUAL EDIT)" if manual else "") + '"]')  # a human acts here
    for t in _used_terminals(table):
        out.append(f'  {ids[t]}(["{t}"])')
    out.append(f"  start --> {ids[table.start]}")
    for src, dst, evs in _merged_edges(table):
        out.append(f"  {ids[src]} -->|{', '.join(evs)}| {ids[dst]}")
    for section, (fill, stroke) in _SECTION_STYLE.items():
        members = [ids[s] for s in table.order if table.nodes[s].section == section]
        if members:
            out.append(f"  classDef {section} fill:{fill},stroke:{stroke}")
            out.append(f"  class {','.join(members)} {section}")
    for t in _used_terminals(table):
        fill, stroke = _TERMINAL_STYLE[t]
        out.append(f"  classDef t_{t} fill:{fill},stroke:{stroke},stroke-width:3px,font-weight:bold")
        out.append(f"  class {t} t_{t}")
    if current is not None and current in ids:
        out.append("  classDef current fill:#0969da,color:#ffffff,stroke:#0550ae,stroke-width:4px")
        out.append(f"  class {ids[current]} current")
    return "\n".join(out) + "\n"


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_dot(table: Table, *, current: str | None = None, title: str | None = None) -> str:
    """A Graphviz `digraph` of `table` (`dot -Tsvg`)."""
    out = [f"digraph {_dot_quote(table.kind)} {{", "  rankdir=TB;", '  node [shape=box, style="rounded,filled", fontname="Helvetica"];']
    if title:
        out.append(f"  label={_dot_quote(title)}; labelloc=t;")
    out.append('  start [shape=circle, label="start", fillcolor="#ffffff"];')
    for s in table.order:
        fill, stroke = _SECTION_STYLE.get(table.nodes[s].section, ("#ffffff", "#24292f"))
        if s == current:
            fill, stroke = "#0969da", "#0550ae"
        extra = ', fontcolor="#ffffff", penwidth=3' if s == current else ""
        out.append(f'  {_dot_quote(s)} [fillcolor="{fill}", color="{stroke}"{extra}];')
    for t in _used_terminals(table):
        fill, stroke = _TERMINAL_STYLE[t]
        out.append(f'  {_dot_quote(t)} [shape=doubleoctagon, fillcolor="{fill}", color="{stroke}", penwidth=2];')
    out.append(f"  start -> {_dot_quote(table.start)};")
    for src, dst, evs in _merged_edges(table):
        out.append(f"  {_dot_quote(src)} -> {_dot_quote(dst)} [label={_dot_quote(', '.join(evs))}];")
    out.append("}")
    return "\n".join(out) + "\n"

