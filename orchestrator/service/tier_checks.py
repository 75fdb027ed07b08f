"""The checks of a `capacity: fleet` tier: a host is not rolled back while another host of its
runbook has an unfinished run, nor while the model-proxy peers route to too few of the others."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from orchestrator.engine.rules.prerequisites import unfinished
from orchestrator.hosts.clients.errors import ClientError
from orchestrator.hosts.clients.model_proxy import ModelProxyClient
from orchestrator.language.runbook import Runbook
from orchestrator.util.user_errors import Refused

if TYPE_CHECKING:  # pragma: no cover
    from orchestrator.service.session import Session


def refuse_tier_busy(session: Session, host: str, rb: Runbook) -> None:
    """That other host may be out of the pool, and a rollback drains this one too."""
    if rb.capacity != "fleet":
        return
    for other, r in unfinished(session.journal, [h for h in rb.hosts if h != host]):
        raise Refused(f"{other} has run {r.run_id} ({r.kind}) that has not ended, at {r.state}: rolling {host} back now "
                      f"would drain a second host of the tier. Let it end (or `orchestrate abort {r.run_id}`), then roll "
                      f"{host} back. Nothing was changed")


async def tier_listing(session: Session, rb: Runbook, hosts: Sequence[str]) -> dict[str, list[str]]:
    """For each host: why the peers do not route the base domain to it (empty: every peer lists it
    healthy; a peer that cannot be asked is a reason). Read-only."""
    domain = rb.domains.of("base")
    out: dict[str, list[str]] = {h: [] for h in hosts}
    peers = [ModelProxyClient(name, str(url).rstrip("/"), session.settings.model_proxy_token, transport=session.transport,
                              retry=session.retry, clock=session.clock)
             for name, url in session.inventory.model_proxy_peers.items()]
    try:
        for peer in peers:
            for h in hosts:
                addr = session.inventory.host(h).model_proxy_address
                try:
                    got = await peer.presence(addr, domain)
                except ClientError as exc:
                    out[h].append(f"{peer.name} could not be asked ({type(exc).__name__})")
                    continue
                if not (got.listed and got.healthy):
                    out[h].append(f"{peer.name} does not list it healthy under {domain}")
    finally:
        for peer in peers:
            await peer.aclose()
    return out


async def refuse_tier_short(session: Session, host: str, rb: Runbook) -> None:
    """A rollback drains its host: admitted only while the peers list every other host of the tier
    (not the journal: a HALTED host outside the pool has no unfinished run). A host itself out
    of the pool only comes back."""
    if rb.capacity != "fleet":
        return
    others = [h for h in rb.hosts if h != host]
    unknown = [h for h in others if h not in session.inventory.hosts]
    if unknown:
        raise Refused(f"capacity cannot be confirmed: {', '.join(unknown)} not in the inventory; rolling {host} back "
                      f"could leave the tier short. Nothing was changed")
    listing = await tier_listing(session, rb, [host, *others])
    if listing[host] and not any("could not be asked" in why for why in listing[host]):
        return  # every peer answered and none lists it: not in the pool now, the rollback brings it back
    short = {h: why for h, why in listing.items() if h != host and why}
    if short:
        serving = len(rb.hosts) - len(short)
        raise Refused(f"rolling {host} back drains it, and the model-proxy peers route the base domain to only "
                      f"{serving} of {len(rb.hosts)} hosts of the tier now ("
                      + "; ".join(f"{h}: {', '.join(why)}" for h, why in short.items())
                      + f"): that would leave {serving - 1} serving. Bring "
                      f"{', '.join(short)} back into the pool first (`orchestrate rollback {next(iter(short))}` if "
                      f"its run ended outside it). Nothing was changed")
