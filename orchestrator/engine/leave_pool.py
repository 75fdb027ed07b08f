"""The live leave-pool guard of a `capacity: fleet` runbook.

A base host leaves the pool with one call: the scoped `down` of its registrar (the forward
`drain.drain`, the rollback table's `drain`). The runbook's capacity step (`presence: {hosts:
others}`) checks the other hosts once, possibly hours before; a run stopped after it (Ctrl-C, a
crash, a pause) and resumed, continued or adopted later would drain its host without asking again.
So, right before any call that takes the host out of the pool, and whatever table it is in:

- every model-proxy peer lists every OTHER host of the tier healthy under the base domain;
- no other host of the tier has a run that has not ended (it may be out, or about to be);
- a peer that cannot be asked, or a host the inventory does not know, counts as a refusal.

A refusal halts the run there, with one line naming the host that is out; nothing is sent (the
stop guard asks `tier_refusal`: executor/runtime.py `StopGuard`).

Right after the drain is confirmed (executor/runtime.py `Waits.recheck_after_drain`), the other hosts' presence is read
again: a second journal (another orchestrator, another state directory) or a human that took
another host out in the same window is seen, and this host rejoins at once (docs/admission.md
says what window remains).

`halted_outside` is the journal's stand-in for "out of the pool" used by admission: a run that
sent a leave-pool call and ended HALTED, with no later DONE or ROLLED_BACK run of its host.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from orchestrator.language.runbook import Runbook

#: What the journal stand-in ignores: a later run of the host that put it back (or never moved it).
_BACK = ("DONE", "ROLLED_BACK")


def leave_pool_services(rb: Runbook) -> set[str]:
    """Services whose `down` takes the host out of the pool: in any step list of the runbook, a
    `down` followed at once by a presence gate with `absent:` (the drain and its confirmation).
    Empty for a runbook whose capacity is not the fleet's."""
    if rb.capacity != "fleet":
        return set()
    out: set[str] = set()
    for steps in rb.step_lists():
        for step, after in zip(steps, steps[1:]):
            if step.down is not None and after.presence is not None and after.presence.absent \
                    and isinstance(step.down.services, list):
                out.update(step.down.services)
    return out


async def tier_refusal(*, journal: Any, rb: Runbook, host: str, peers: Sequence[Any],
                       addresses: Mapping[str, str], run_id: str | None = None) -> tuple[str, str] | None:
    """(the other host that is out, why) when `host` must not leave the pool now; None when every
    other host of the tier is in it and has no unfinished run. Read live; never assumes capacity.
    `journal` None: only the peers count (the re-check after a drain: this run's own tier lease
    already keeps this journal's other runs out)."""
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
    """The newest run of `host` (this runbook) if it sent a leave-pool call and ended HALTED with
    no later DONE/ROLLED_BACK run of the host: the journal's stand-in for "out of the pool"."""
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
    """Admission (a rollout or rollback of a `capacity: fleet` host): refused while another host
    of the tier is, by the journal, outside the pool (`halted_outside`). A host that is itself
    outside by the same measure is let through: its rollback only brings it back."""
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
    if rb.capacity != "fleet" or step.presence is None or not step.presence.absent:
        return None
    services = leave_pool_services(rb)
    for steps in rb.step_lists():
        for before, this in zip(steps, steps[1:]):
            if this == step and before.down is not None and isinstance(before.down.services, list) \
                    and services & set(before.down.services):
                return before
    return None
