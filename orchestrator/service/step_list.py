"""The step list `orchestrate status` prints (each state of the run's table: its section and what it
says), cached by what it is computed from, so that `status` answers without the runbook schema.

Loading a runbook builds its ~50 pydantic models (most of `status`'s start-up, issue 25). The list
depends only on the runbook file's bytes, the code that compiles it, and the run's kind, start
phase and rollback replicas: it is kept as JSON under `<state dir>/cache/`, keyed by the sha256 of
all of these. A changed runbook or a changed module of the package always misses (the key holds
the sha256 of the file and the size and mtime of every module of the package); a cache that
cannot be read or parsed is ignored and rewritten; a cache that cannot be written is not an error.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

#: Bump when the cached form changes.
_FORM = 1


def _code_fingerprint() -> str:
    """The package's version and the (path, size, mtime) of each of its modules."""
    import orchestrator

    root = Path(orchestrator.__file__).resolve().parent
    h = hashlib.sha256(f"{_FORM}:{getattr(orchestrator, '__version__', '')}".encode())
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in sorted(it, key=lambda e: e.name):
                if e.is_dir(follow_symlinks=False) and e.name != "__pycache__":
                    stack.append(e.path)
                elif e.name.endswith(".py"):
                    st = e.stat()
                    h.update(f"{e.path}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _compute(run: Any) -> list[list[str]]:
    from orchestrator.language.runbook import load_runbook
    from orchestrator.service.run_info import table_for

    table = table_for(run, load_runbook(run.runbook))
    return [[sid, table.nodes[sid].section, table.nodes[sid].step.say if table.nodes[sid].step else ""]
            for sid in table.order]


def _key(run: Any) -> str | None:
    from orchestrator.language.runbook_paths import resolve_runbook_path

    try:
        data = resolve_runbook_path(run.runbook).read_bytes()
    except Exception:  # noqa: BLE001 - no file: the runbook load says why (uncached)
        return None
    ctx = run.context or {}
    what = json.dumps([run.runbook, run.kind, ctx.get("start_phase"), list(ctx.get("replicas") or [])], default=str)
    return hashlib.sha256(b"%s\n%s\n%s" % (hashlib.sha256(data).hexdigest().encode(), _code_fingerprint().encode(),
                                           what.encode())).hexdigest()


def step_list(run: Any, state_dir: Path | None) -> list[tuple[str, str, str]]:
    """[(state id, section, say), ...] in the table's order, for the run's table."""
    key = _key(run) if state_dir is not None else None
    if key is None:
        return [tuple(x) for x in _compute(run)]  # type: ignore[misc]
    path = Path(state_dir) / "cache" / f"steps-{key}.json"
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(cached, list) and all(isinstance(x, list) and len(x) == 3 and all(isinstance(y, str) for y in x)
                                            for x in cached):
            return [tuple(x) for x in cached]  # type: ignore[misc]
    except (OSError, ValueError):
        pass  # no cache, or a corrupt one: computed afresh below
    rows = _compute(run)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(rows), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only state dir: no cache
    return [tuple(x) for x in rows]  # type: ignore[misc]
