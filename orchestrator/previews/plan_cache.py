"""`orchestrate plan`'s offline text, cached (issue 25: `plan` answers without building the runbook
schema, the step handlers and the inventory parser when nothing it reads has changed).

An offline plan of one HOST without --compose-file is a pure function of its arguments (HOST,
--tag, --runbook, --format, --rollback), the inventory file's bytes (it names the host's compose
project), the runbook files' bytes (every shipped runbook: `--runbook` left out picks the one that
names HOST; plus the file --runbook names when it is a path) and the code. The key is the sha256 of
all of these (orchestrator/util/result_cache.py: a changed file or module always misses). Only a
plan that succeeded is kept, so an error is always computed afresh and said as before.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.util import result_cache


def plan_cache_path(settings: Any, args: list[Any]) -> Path | None:
    """Where this plan's text is kept, or None (no cache for it: anything unreadable or unusual)."""
    try:
        from orchestrator.language.runbook_paths import RUNBOOK_DIR

        inventory = Path(settings.inventory_path()).resolve()
        parts: list[bytes | str] = [json.dumps([str(a) if a is not None else None for a in args]), str(inventory),
                                    inventory.read_bytes(), str(RUNBOOK_DIR.resolve())]
        for p in sorted(RUNBOOK_DIR.glob("*.y*ml")):
            parts += [p.name, p.read_bytes()]
        if args[2] is not None:  # --runbook: the file it resolves to, wherever it is
            from orchestrator.language.runbook_paths import resolve_runbook_path

            named = resolve_runbook_path(args[2]).resolve()
            parts += [str(named), named.read_bytes()]
        return result_cache.cache_path(settings.state_dir, "plan", result_cache.key_of(*parts), ".txt")
    except Exception:  # noqa: BLE001 - no cache: the plan is computed and says what is wrong
        return None


def cached_plan(path: Path | None) -> str | None:
    return result_cache.read(path) if path is not None else None


def keep_plan(path: Path | None, text: str) -> None:
    if path is not None:
        result_cache.write(path, text)
