"""What keeps a stop from taking capacity away (a part of `Runtime`, runtime.py).

`stop_guard` allows stopping an engine only while it is known not to serve, or an engine of
another replica is known to serve (one-host capacity), or the model-proxy peers no longer list the
host (fleet capacity): "unknown" never permits it, and a call that takes the host out of a fleet's
pool first asks the tier live (orchestrator/engine/leave_pool.py). `not_owned`: a rollback of a
rollout stops only the containers this run created (orchestrator/engine/ownership.py).
"""

from __future__ import annotations

from typing import Any

from orchestrator.hosts.clients.errors import ClientError
from orchestrator.hosts.clients.model_proxy import split_host
from orchestrator.hosts.parsers.docker_ps import Container
from orchestrator.engine import leave_pool
from orchestrator.engine.serving_evidence import stop_refusal
from orchestrator.language.machine import Node


class RuntimeGuards:
    """The stop guard, the pool checks and rollback ownership; uses Runtime's clients, runbook, context."""

    async def recheck_after_drain(self, step: Any) -> str | None:
        """Right after a drain is confirmed: the tier again (leave_pool.recheck_after_drain)."""
        return await leave_pool.recheck_after_drain(self, step)

    async def stop_guard(self, services: list[str]) -> str | None:
        """Why stopping these services now could take down the last serving replica (None: safe).
        An engine is stopped only when it is known not to serve, or (one-host capacity) an engine
        of another replica is known to serve, or (fleet capacity) the peers no longer list the
        host. "Unknown" never permits a stop. A call that takes the host out of a fleet's pool
        first asks the tier live, right now (leave_pool.py)."""
        if refusal := await leave_pool.guard(self, services):
            return refusal
        engines = [s for s in services if self.rb.replica_of(s)]
        if not engines:
            return None
        containers = await self.ps()
        stopping = {self.rb.replica_of(s) for s in engines}
        if await self._in_flight():
            return ("refusing to stop " + ", ".join(engines) + ": compose-manager reports another operation in flight "
                    "(GET /status); nothing was stopped. Look at the host, then resume")
        listed: list[str] | None = None  # asked of the peers once per guard, when it matters
        for e in engines:
            mine = await self.serving(e, containers)
            if mine.not_serving:
                continue  # stopping an engine known not to serve takes no capacity away
            if self.rb.capacity == "fleet":
                if listed is None:
                    listed = await self._still_listed()
                if not listed:
                    continue  # drained: the runbook's other hosts carry the domain
                return (f"refusing to stop {e}: it {'serves' if mine.serving else 'may serve (' + mine.why + ')'} and "
                        f"{self.run.host} is not drained ({'; '.join(listed)}); "
                        f"stopping it would cut traffic the model-proxy still sends here. Nothing was stopped")
            others = [o for o in self.rb.engines() if self.rb.replica_of(o) not in stopping]
            verdicts = {o: await self.serving(o, containers) for o in others}
            refusal = stop_refusal(e, mine, verdicts, self.run.host)
            if refusal:
                return refusal
        return None

    #: `ip:port` -> `ip` (a peer asked about a bare host matches every port of it)
    host_part = staticmethod(split_host)

    async def _still_listed(self) -> list[str]:
        """Where a model-proxy peer still lists this host, under any of the runbook's domains
        (empty: drained). A peer that cannot be asked counts as listing it: never stop blind."""
        addr = split_host(self.entry.model_proxy_address)  # any port: the registrar's may differ from ours
        out: list[str] = []
        for peer in self.clients.peers:
            for domain in self.rb.domains.roles().values():
                try:
                    got = await peer.presence(addr, domain)
                except ClientError as exc:
                    out.append(f"{peer.name} could not be asked about {domain} ({type(exc).__name__})")
                    continue
                if got.listed:
                    out.append(f"{peer.name} lists {addr} under {domain}")
        return out

    def not_owned(self, node: Node, present: list[Container]) -> dict[str, str]:
        """Service -> why it is left running: in a rollback of a rollout (a phase's rollback, or the
        whole-host rollback an abort takes), a down stops only containers this run created. An
        operator's `orchestrate rollback` run is exempt: stopping the rolled-out engines is what
        the operator asked for (the stop guard still applies)."""
        from orchestrator.engine import ownership

        if node.section not in ownership.ROLLBACK_SECTIONS or self.table.kind != "rollout":
            return {}
        _, others = ownership.owned_split(present, self.ctx.created)
        out = {}
        for c in others:
            why = ownership.not_ours_note(c, node.id, self.ctx.stopped)
            out[c.service or c.name] = why
            if self.rb.replica_of(c.service or c.name) and why not in self.ctx.not_stopped:
                self.ctx.not_stopped.append(why)  # an engine left running is said in the final message
            self.log.warning("rollback_left_unowned_container", service=c.service or c.name, container=c.id[:12])
            self.emit("note", text=why)
        return out
