"""Foreign changes: compose-manager calls this run's journal did not make (pure).

compose-manager logs every up/down it accepts, whatever the outcome (never a dry run). After a
position in the log this run knows (its *mark*: entries known, the last one's identity, the last
journal effect id), every entry must be one of the calls this run journaled since, in order; a
journaled call may be missing (refused before acceptance), never the other way round. An entry
none explains was made by someone else: the run stops, rolling nothing back. Only
`compose_manager_started` (compose-manager's own restart) is benign.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.hosts.parsers.action_log import Action

#: Entries that change no container: compose-manager's own restart.
BENIGN = frozenset({"compose_manager_started"})


@dataclass(frozen=True)
class OwnCall:
    """A mutating call this run journaled, as the action log would record it."""

    action: str  # compose_up | compose_down
    tag: str | None
    file: str | None
    services: tuple[str, ...]

    def explains(self, a: Action) -> bool:
        return (a.action == self.action and a.tag == self.tag and a.file == self.file
                and sorted(a.services) == sorted(self.services))


def own_call(kind: str, request: dict[str, Any]) -> OwnCall | None:
    action = next((a for a in ("compose_down", "compose_up") if kind.startswith(a)), None)
    if action is None:
        return None
    body = request.get("request", request) if isinstance(request, dict) else {}
    services = body.get("services") or ()
    return OwnCall(action, body.get("tag"), body.get("file"), tuple(services))


def identity(a: Action) -> list[Any]:
    return [a.timestamp, a.action, a.tag, a.file, list(a.services)]


def since_mark(actions: Sequence[Action], mark: dict[str, Any]) -> list[Action] | None:
    """The entries after the mark; None when the log was replaced or rewritten."""
    count = int(mark.get("count", 0))
    if len(actions) < count:
        return None
    last = mark.get("last")
    if count and last is not None and identity(actions[count - 1]) != list(last):
        return None
    return list(actions[count:])


def unexplained(new_actions: Iterable[Action], own: Sequence[OwnCall]) -> list[Action]:
    """The entries no call of `own` explains, matched in order (a call may have left no entry)."""
    out: list[Action] = []
    i = 0
    for a in new_actions:
        if a.action in BENIGN:
            continue
        j = next((k for k in range(i, len(own)) if own[k].explains(a)), None)
        if j is None:
            out.append(a)
        else:
            i = j + 1
    return out


def describe_action(a: Action) -> str:
    """`compose_down of nginx (prod/X.yaml@v0.0.300) at 2026-11-30T20:01:45.05+00:00`."""
    what = ", ".join(a.services) if a.services else ("every service" if a.action.startswith("compose_") else "")
    where = f"{a.file}@{a.tag}" if a.file and a.tag else (a.file or a.tag or "")
    text = a.action + (f" of {what}" if what else "") + (f" ({where})" if where else "")
    return text + f" at {a.timestamp or 'an unrecorded time'}"


def foreign_message(host: str, foreign: Sequence[Action], *, in_flight: str | None = None) -> str:
    """One line naming what someone else did, for the run's end message."""
    first = describe_action(foreign[0])
    more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
    busy = f"; compose-manager is running {in_flight} now" if in_flight else ""
    return (f"foreign change on {host}: compose-manager's action log records {first}{more}, which this run did not make "
            f"(another orchestrator or a person is acting on the host){busy}; nothing is rolled back: find who did it "
            f"before resuming or rolling back")


def new_mark(actions: Sequence[Action], effect_id: int) -> dict[str, Any]:
    return {"count": len(actions), "last": identity(actions[-1]) if actions else None, "effect_id": effect_id}


def unjournaled(actions: Iterable[Action], journaled: Sequence[OwnCall], *, file: str, tag: str) -> list[Action]:
    """The up/down entries of `file`@`tag` no journaled call explains (one each, in any order)."""
    pool = list(journaled)
    out: list[Action] = []
    for a in actions:
        if a.action not in ("compose_up", "compose_down") or a.file != file or a.tag != tag:
            continue
        k = next((i for i, c in enumerate(pool) if c.explains(a)), None)
        if k is None:
            out.append(a)
        else:
            pool.pop(k)
    return out


def refuse_foreign_part_way(journal: Any, host: str, actions: list[Any], file: str, tag: str,
                            journal_location: str) -> str | None:
    """The refusal for a part-way host whose target calls no run in this journal made."""
    journaled = [oc for run in journal.list_runs(host, limit=200) for e in journal.effects(run.run_id)
                 if e.mutating and (oc := own_call(e.kind, e.request)) is not None]
    foreign = unjournaled(actions, journaled, file=file, tag=tag)
    if not foreign:
        return None
    more = f" ({len(foreign)} such entries)" if len(foreign) > 1 else ""
    where = f" ({journal_location})" if journal_location else ""
    return (f"{host} is part-way, but no run in this journal{where} moved it: compose-manager's action log records "
            f"{describe_action(foreign[-1])}{more}. Another orchestrator (another state directory or database) or a "
            f"person is driving {host}; nothing was changed: act from the journal that made these calls")
