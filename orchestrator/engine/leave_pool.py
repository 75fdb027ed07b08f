"""The live leave-pool guard of a `capacity: fleet` runbook.

A base host leaves the pool with the scoped `down` of its registrar. The capacity step checks the
other hosts once, maybe hours before; a run resumed after it would drain without asking again. So
right before any call that takes the host out of the pool (the stop guard asks `tier_refusal`),
every peer must list every OTHER host of the tier healthy under the base domain, and no other host
may have an unfinished run; a peer that cannot be asked or an unknown host is a refusal, which
halts the run with nothing sent. Right after the drain is confirmed the peers are read again, so
another journal or a human that took another host out meanwhile is seen and this host rejoins.
`halted_outside` is the journal's stand-in for "out of the pool", used by admission.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from orchestrator.language.runbook import Runbook, Step

#: What the journal stand-in ignores: a later run of the host that put it back (or never moved it).
_BACK = ("DONE", "ROLLED_BACK")


def _drains(rb: Runbook) -> Iterator[tuple[Step, list[str], Step]]:
    """(a `down`, its services, the presence gate with `absent:` right after it) of a fleet runbook."""
    if rb.capacity != "fleet":
        return
    for steps in rb.step_lists():
        for step, after in zip(steps, steps[1:]):
            if step.down is not None and after.presence is not None and after.presence.absent \
                    and isinstance(step.down.services, list):
                yield step, step.down.services, after


def leave_pool_services(rb: Runbook) -> set[str]:
    """Services whose `down` takes the host out of the pool."""
    return {s for _, services, _ in _drains(rb) for s in services}


async def tier_refusal(*, journal: Any, rb: Runbook, host: str, peers: Sequence[Any],
                       addresses: Mapping[str, str], run_id: str | None = None) -> tuple[str, str] | None:
    """(the other host that is out, why), or None. `journal` None: only the peers count (the re-check
    after a drain: this run's own tier lease keeps this journal's other runs out)."""
    from orchestrator.engine.rules.prerequisites import unfinished
    from orchestrator.hosts.clients.errors import ClientError

    if rb.capacity != "fleet":
        return None
    others = [h for h in rb.hosts if h != host]
    unknown = [h for h in others if h not in addresses]
    if unknown:
        return unknown[0], f"{unknown[0]} is not in the inventory, so its capacity cannot be confirmed"
    for h, r in unfinished(journal, others, but=run_id) if journal is not None else ():
        return h, f"{h} has run {r.run_id} ({r.kind}) that has not ended, at {r.state}: it may be out of the pool"
    domain = rb.domains.of("base")
    for peer in peers:
        for h in others:
            try:
                got = await peer.presence(addresses[h], domain)
            except ClientError as exc:
                return h, f"{peer.name} could not be asked whether {h} is in the pool ({type(exc).__name__}): it counts as out"
            if not (got.listed and got.healthy):
                return h, f"{h} is out of the pool ({peer.name} does not list it healthy under {domain})"
    return None


def halted_outside(journal: Any, rb: Runbook, host: str) -> Any | None:
    """The newest run of `host` (this runbook) if it sent a leave-pool call and ended HALTED with no
    later DONE/ROLLED_BACK run of the host."""
    services = leave_pool_services(rb)
    if not services:
        return None
    for r in journal.list_runs(host, limit=50):
        if r.runbook != rb.name or not r.terminal:
            continue
        if r.outcome in _BACK:
            return None
        if r.outcome != "HALTED":
            continue  # an ABORTED run changed nothing; look further back
        drained = any(e.kind.startswith("compose_down") and services & set((e.request.get("request") or {}).get("services") or ())
                      for e in journal.effects(r.run_id))
        if drained:
            return r
    return None


def refuse_tier_halted(journal: Any, rb: Runbook, host: str) -> None:
    """Admission: refused while another host of the tier is, by the journal, outside the pool. A host
    itself outside is let through: its rollback only brings it back."""
    from orchestrator.util.user_errors import Refused

    if rb.capacity != "fleet" or halted_outside(journal, rb, host) is not None:
        return
    for other in rb.hosts:
        if other == host:
            continue
        r = halted_outside(journal, rb, other)
        if r is not None:
            raise Refused(f"{other}'s run {r.run_id} ended HALTED after taking {other} out of the pool, and no later run "
                          f"put it back: {host} is not taken out of the tier now. Run `orchestrate rollback {other}` "
                          f"first (it brings {other} back). Nothing was changed")


def drain_down_before(rb: Runbook, step: Any) -> Any | None:
    """The leave-pool `down` step right before `step` (a drain's confirmation), or None."""
    return next((down for down, services, after in _drains(rb) if after == step and services), None)
