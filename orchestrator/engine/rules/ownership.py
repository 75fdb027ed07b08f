"""Runs own containers, not names (pure): the old r1 and the new r1 share a service name, and a
rollback that stopped "r1" by name after r1's own stop was refused would stop the OLD, serving r1.
The run's ledger (context, rebuilt on resume from each call's journaled docker/ps baseline):
`created`, the IDs of an up's services listed after it and not before; `stopped`, the IDs listed
before a down (or an up: `--remove-orphans`) and not after. A rollback's down stops only what is in
`created`; a namesake is left running, and why is said in the run's final message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

from orchestrator.hosts.parsers.docker_ps import Container

#: sections of the state table whose downs may stop only what the run created
ROLLBACK_SECTIONS = frozenset({"rollback", "full_rollback"})


def ps_ids(containers: Iterable[Container]) -> dict[str, str]:
    """docker/ps as a baseline to journal with a compose call: container ID -> service."""
    return {c.id: (c.service or c.name) for c in containers if c.id}


def baseline_ids(baseline: Mapping[str, Any]) -> dict[str, str]:
    """The ID -> service baseline a journaled call recorded: its docker/ps, else (older intents) `ids`."""
    ps = baseline.get("ps")
    if isinstance(ps, Mapping):
        return {str(k): str(v) for k, v in ps.items()}
    ids = baseline.get("ids") or {}
    return {str(cid): str(svc) for svc, cid in ids.items() if cid}


def created_ids(before: Mapping[str, str], after: Iterable[Container], services: Iterable[str]) -> dict[str, str]:
    wanted = set(services)
    return {c.id: svc for c in after if (svc := c.service or c.name) in wanted and c.id and c.id not in before}


def gone_ids(before: Mapping[str, str], after: Iterable[Container], services: Iterable[str] | None = None) -> dict[str, str]:
    now = {c.id for c in after}
    wanted = set(services) if services is not None else None
    return {cid: svc for cid, svc in before.items() if cid not in now and (wanted is None or svc in wanted)}


def record(ledger: MutableMapping[str, dict[str, str]], found: Mapping[str, str], state: str) -> list[str]:
    """Add `found` (ID -> service) to a ledger, keeping the first state that saw each ID; the IDs added."""
    added = []
    for cid, svc in found.items():
        if cid not in ledger:
            ledger[cid] = {"service": svc, "state": state}
            added.append(cid)
    return added


def owned_split(present: Iterable[Container], created: Mapping[str, Any]) -> tuple[list[Container], list[Container]]:
    """(containers this run created, containers it did not) among those a rollback would stop."""
    mine: list[Container] = []
    others: list[Container] = []
    for c in present:
        (mine if c.id in created else others).append(c)
    return mine, others


def not_ours_note(c: Container, state: str, stopped: Mapping[str, Any]) -> str:
    """Why a rollback step left a container running, for the run's record."""
    svc = c.service or c.name
    mine = [cid[:12] for cid, v in stopped.items() if v.get("service") == svc]
    also = f" (this run stopped {', '.join(mine)} under that name)" if mine else ""
    return (f"{state} did not stop {svc}: container {c.id[:12]} ({c.status or c.state}) is not one this run created, "
            f"so it was left running{also}")
