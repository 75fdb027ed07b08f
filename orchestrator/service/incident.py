"""An incident rollback from a machine that does not hold the rollout's journal.

compose-manager remembers only its last two successful ups (after a rollout both name the new
tag), so the previous tag and file come from the rollout's journal (its before-state; in team mode
the shared database) or from an explicit `--to-tag T --to-file F`. Without either, the refusal
names the journal this machine reads and the exact command, with a target suggested from
compose-manager's action log (every up ever accepted, in order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.engine.rules import targets
from orchestrator.hosts.inventory import HostEntry
from orchestrator.hosts.parsers.action_log import Action
from orchestrator.language.runbook import Runbook
from orchestrator.service.session import _compose_client

if TYPE_CHECKING:
    from orchestrator.service.session import Session


@dataclass(frozen=True)
class HostHistory:
    """The tag the rollout's file was last deployed at (None: never), and the newest up of another
    file before that (a suggested previous deploy, never applied without a dry run)."""

    new_tag: str | None
    suggested: tuple[str, str] | None
    suggested_at: str | None


def read_history(actions: list[Action], current: tuple[str, str] | None, rb: Runbook) -> HostHistory:
    """From the action log (oldest first) and the last successful up (`current`: tag, file)."""
    new_tag = current[0] if current is not None and current[1] == rb.file else None
    if new_tag is None:
        new_tag = next((a.tag for a in reversed(actions) if a.action == "compose_up" and a.file == rb.file and a.tag), None)
    first_new = next((i for i, a in enumerate(actions)
                      if a.action == "compose_up" and a.file == rb.file and a.tag == new_tag), len(actions))
    known = set(rb.deploys)
    before = [a for a in actions[:first_new] if a.action == "compose_up" and a.tag and a.file and a.file != rb.file]
    pick = next((a for a in reversed(before) if not known or a.file in known), None)
    return HostHistory(new_tag, (pick.tag, pick.file) if pick else None, pick.timestamp if pick else None)  # type: ignore[arg-type]  # `before` keeps only entries with a tag and a file


async def host_ups(session: Session, entry: HostEntry) -> tuple[list[Action], tuple[str, str] | None]:
    """compose-manager's action log (oldest first) and its last successful up (tag, file), if any."""
    async with _compose_client(session, entry) as cm:
        actions = list(await cm.action_log())
        cur = (await cm.version()).project(entry.project).current
    return actions, (cur.tag, cur.file) if cur is not None and cur.tag and cur.file else None


async def host_history(session: Session, host: str, rb: Runbook) -> HostHistory:
    return read_history(*await host_ups(session, session.inventory.host(host)), rb)


def no_journal_message(session: Session, host: str, rb: Runbook, history: HostHistory, why: str) -> str:
    """The refusal when neither a journaled rollout nor an explicit target is at hand (one line)."""
    settings = session.settings  # never the database URL: it may hold a password
    where = ("the shared PostgreSQL journal (ORCHESTRATOR_DATABASE_URL)" if settings.database_url
             else f"this machine's journal {settings.state_dir / 'journal.sqlite3'}")
    if history.suggested is not None:
        target = (f"compose-manager's action log shows {history.suggested[1]}@{history.suggested[0]} as the last other "
                  f"file deployed before {rb.file}" + (f" (at {history.suggested_at})" if history.suggested_at else "")
                  + "; check it, it is dry-run before anything stops")
    else:
        target = "compose-manager's action log shows no earlier deploy to suggest: take the tag and file from the rollout's change"
    tag, file = history.suggested or ("TAG", "FILE")
    return (f"{why}; {where} holds no rollout of {host}. The rollout's journal holds its before-state (previous tag and "
            f"file of every service): run this where that journal is (team mode: the same ORCHESTRATOR_DATABASE_URL as "
            f"the server that ran it), or give the target explicitly: `{targets.rollback_command(host, rb.name, tag, file)}` "
            f"({target})")
