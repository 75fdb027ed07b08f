"""Foreign changes, read against a journal (the I/O half of `orchestrator.engine.foreign_change`)."""

from __future__ import annotations

from typing import Any

from orchestrator.engine.foreign_change import OwnCall, own_call, part_way_message, unjournaled


def journaled_calls(journal: Any, host: str, limit: int = 200) -> list[OwnCall]:
    """Every mutating compose call any run of `host` journaled here, as the action log records them."""
    out: list[OwnCall] = []
    for run in journal.list_runs(host, limit=limit):
        for e in journal.effects(run.run_id):
            if e.mutating and (oc := own_call(e.kind, e.request)) is not None:
                out.append(oc)
    return out


def refuse_foreign_part_way(journal: Any, host: str, actions: list[Any], file: str, tag: str,
                            journal_location: str) -> str | None:
    """The refusal for a part-way host whose target calls (`file`@`tag`) this journal did not make."""
    foreign = unjournaled(actions, journaled_calls(journal, host), file=file, tag=tag)
    return part_way_message(host, foreign, journal_location) if foreign else None
