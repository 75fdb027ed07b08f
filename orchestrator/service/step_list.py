"""The step list `orchestrate status` prints (each state of the run's table: its section and what it
says), cached by what it is computed from, so that `status` answers without the runbook schema.

Loading a runbook builds its ~50 pydantic models (most of `status`'s start-up, issue 25). The list
depends only on the runbook file's bytes, the code that compiles it, and the run's runbook name,
kind, start phase and rollback replicas: it is kept as JSON under `<state dir>/cache/` keyed by the
sha256 of all of these (orchestrator/util/result_cache.py: a changed runbook or module always
misses; a cache that cannot be read or parsed is computed afresh and rewritten).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.util import result_cache


def _compute(run: Any) -> list[list[str]]:
    from orchestrator.language.runbook import load_runbook
    from orchestrator.service.run_info import table_for

    table = table_for(run, load_runbook(run.runbook))
    return [[sid, table.nodes[sid].section, table.nodes[sid].step.say if table.nodes[sid].step else ""]
            for sid in table.order]


def _path(run: Any, state_dir: Path) -> Path | None:
    from orchestrator.language.runbook_paths import resolve_runbook_path

    try:
        data = resolve_runbook_path(run.runbook).read_bytes()
    except Exception:  # noqa: BLE001 - no file: the runbook load says why (uncached)
        return None
    ctx = run.context or {}
    what = json.dumps([run.runbook, run.kind, ctx.get("start_phase"), list(ctx.get("replicas") or [])], default=str)
    return result_cache.cache_path(state_dir, "steps", result_cache.key_of(data, what), ".json")


def _valid(rows: Any) -> bool:
    return isinstance(rows, list) and all(isinstance(x, list) and len(x) == 3 and all(isinstance(y, str) for y in x)
                                          for x in rows)


def step_list(run: Any, state_dir: Path | None) -> list[tuple[str, str, str]]:
    """[(state id, section, say), ...] in the table's order, for the run's table."""
    path = _path(run, state_dir) if state_dir is not None else None
    if path is not None:
        text = result_cache.read(path)
        try:
            rows = json.loads(text) if text is not None else None
        except ValueError:
            rows = None  # a corrupt cache: computed afresh below
        if _valid(rows):
            return [tuple(x) for x in rows]  # type: ignore[misc,union-attr]
    rows = _compute(run)
    if path is not None:
        result_cache.write(path, json.dumps(rows))
    return [tuple(x) for x in rows]  # type: ignore[misc]
