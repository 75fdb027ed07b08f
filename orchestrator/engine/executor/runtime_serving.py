"""Whether an engine serves, and what the host runs now (a part of `Runtime`, runtime.py).

The evidence the one serving model (orchestrator/engine/serving_evidence.py) judges: docker/ps,
the engine's log window (never "not serving" for a ready line docker's log rotation dropped), the
model-proxy peers, the soak relay's /health; and the watches built on it: the engines a soak
watches, still the same containers and still up, and the final message's `host now` line.
"""

from __future__ import annotations

from orchestrator.hosts.clients.errors import ClientError
from orchestrator.hosts.clients.model_proxy import split_host
from orchestrator.hosts.parsers.docker_ps import Container, by_service
from orchestrator.engine.serving_evidence import LogWindow, Peers, Verdict, judge, up_seconds

#: The window a serving check reads (the ready line must be in it, with no later startup line).
SERVING_WINDOW = 5000


class RuntimeServing:
    """Serving verdicts and engine watches; uses Runtime's clients, entry, runbook, context, env map."""

    async def log_window(self, service: str) -> LogWindow:
        """The engine's last SERVING_WINDOW log lines (docker's rotation may keep fewer), or why
        they could not be read (the file never fetched on the host, no env map, ...)."""
        try:
            file = await self._log_file(service)
            text = await self.clients.compose.logs(file, [service], SERVING_WINDOW, self.entry.project)
        except ClientError as exc:
            return LogWindow.unreadable(f"{type(exc).__name__}: {self.scrub(str(exc))[:160]}")
        return LogWindow(text.splitlines(), asked=SERVING_WINDOW)

    async def _log_file(self, service: str) -> str:
        """The file a serving check reads `service`'s log through: the file that deployed it as
        this run knows it (`service_file`), else the file of the newest up in compose-manager's
        action log that named it (before the before-state is read, e.g. at placement or in an
        early abort's `host now`: the new file may not define the old engine at all)."""
        known = (self.ctx.deployed.get(service) or self.ctx.previous.get(service)
                 or self.ctx.previous.get(self._previous_ref_of.get(service, "")))
        if known:
            return known["file"]
        if self._files_by_action_log is None:
            self._files_by_action_log = {}
            try:
                for act in await self.clients.compose.action_log():
                    if act.action == "compose_up" and act.file:
                        self._files_by_action_log.update({s: act.file for s in act.services})
            except ClientError:
                pass  # the new file, as before
        return self._files_by_action_log.get(service, self.rb.file)

    async def peers_view(self) -> Peers:
        """Do the model-proxy peers route to this host (every peer lists it healthy under one of
        the runbook's domains)? A peer that cannot be asked leaves it undecided (None)."""
        addr = split_host(self.entry.model_proxy_address)
        if not self.clients.peers:
            return Peers(None, "no model-proxy peer is configured")
        missing = []
        for peer in self.clients.peers:
            routed = False
            for domain in self.rb.domains.roles().values():
                try:
                    got = await peer.presence(addr, domain)
                except ClientError as exc:
                    return Peers(None, f"model-proxy {peer.name} could not be asked ({type(exc).__name__})")
                if got.listed and got.healthy:
                    routed = True
                    break
            if not routed:
                missing.append(peer.name)
        if missing:
            return Peers(False, f"{', '.join(missing)} does not list {addr} healthy")
        names = " and ".join(p.name for p in self.clients.peers)
        return Peers(True, f"the model-proxy peers ({names}) route to {addr}")

    async def serving(self, service: str, containers: list[Container] | None = None, *, live: bool = False) -> Verdict:
        """Serving, not serving or unknown, from docker/ps, the log window and the peers (see
        orchestrator/engine/serving_evidence.py); the peers and the other engines' logs are read only
        when docker and this engine's log do not decide. `live`: this engine's ready line (and this
        run's cold start of it) count for nothing, only live evidence says serving (a cold-start gate
        whose milestones rotated out, steps/cold_start_memory.py)."""
        from orchestrator.engine.serving_evidence import base_verdict, from_docker, from_log

        containers = containers if containers is not None else await self.ps()
        by_svc = by_service(containers)
        c = by_svc.get(service)
        g = self.rb.log_gates
        decided = from_docker(service, c)
        if decided is not None:
            return decided
        assert c is not None
        ran_here = self.ctx.ready.get(service) == c.id and not live
        marks = () if live else g.required
        log = await self.log_window(service)
        decided = from_log(service, log, ready_marks=marks, startup=g.startup, ran_here=ran_here)
        if decided is not None:
            return decided
        others: dict[str, Verdict] = {}
        for o in self.rb.engines():
            if o == service:
                continue
            oc = by_svc.get(o)
            o_log = await self.log_window(o) if oc is not None and from_docker(o, oc) is None else LogWindow(())
            others[o] = base_verdict(o, oc, o_log, ready_marks=g.required, startup=g.startup,
                                     ran_here=oc is not None and self.ctx.ready.get(o) == oc.id)
        relay = await self._relay_health(service, containers)
        return judge(service, c, log, ready_marks=marks, startup=g.startup, ran_here=ran_here,
                     peers=None if relay else await self.peers_view(), others=others,
                     cold_start_s=self.rb.timeouts.cold_start, relay=relay)

    def _relay_ports(self) -> dict[str, tuple[int, str]]:
        """replica -> (soak relay port, token variable), from the runbook's `relay:` gates."""
        out: dict[str, tuple[int, str]] = {}
        for ph in self.rb.phases:
            for st in ph.steps:
                if st.relay is not None and ph.replica:
                    out.setdefault(ph.replica, (st.relay.port, st.relay.token_variable))
        return out

    async def _relay_health(self, service: str, containers: list[Container]) -> str | None:
        """Live, per engine: where a container publishes the soak relay's port of this engine's
        replica and this engine is the only one of its replica running, GET /health through it.
        What it saw when it answered; None otherwise (no relay, a refusal, a 502: no evidence,
        since the relay may route to a container that is gone). Only with the env map in hand
        (its token): a serving check never reads the dashboard itself."""
        from orchestrator.engine.serving_evidence import publishes

        replica = self.rb.replica_of(service)
        port = self._relay_ports().get(replica or "")
        if port is None or self.env is None:
            return None
        siblings = [c for c in containers if self.rb.replica_of(c.service or c.name) == replica]
        if [c.service or c.name for c in siblings] != [service] or not any(publishes(c, port[0]) for c in containers):
            return None
        try:
            await self.relay_client(port[0], self.env.get(port[1], "")).health()
        except ClientError:
            return None
        return f"the soak relay :{port[0]} (its replica's port) answers /health"

    async def running_engine_verdicts(self, containers: list[Container] | None = None) -> dict[str, Verdict]:
        """The serving verdict of every engine docker/ps lists (running or restarting)."""
        containers = containers if containers is not None else await self.ps()
        engines = [(c.service or c.name) for c in containers if self.rb.replica_of(c.service or c.name)]
        return {svc: await self.serving(svc, containers) for svc in engines}

    async def host_now(self) -> str:
        """One line for a final message: what each replica runs now and whether it serves."""
        try:
            containers = await self.ps()
            parts = []
            for replica, engines in self.rb.replicas.items():
                running = [c for c in containers if (c.service or c.name) in engines]
                if not running:
                    parts.append(f"{replica}: nothing running")
                    continue
                for c in running:
                    svc = c.service or c.name
                    v = await self.serving(svc, containers)
                    parts.append(f"{replica}: {svc} {v.phrase()}")
            if self.rb.capacity == "fleet":  # engines up is not traffic: say whether the peers route here
                listed = await self._still_listed()
                parts.append("in the pool: " + "; ".join(listed) if listed else
                             "NOT in any pool on the model-proxy peers (look at model-proxy-registrar)")
            return "host now: " + "; ".join(parts)
        except ClientError as exc:
            return f"host now: unknown (docker/ps could not be read: {type(exc).__name__})"

    async def watch_engines(self) -> dict[str, tuple[str, float | None]]:
        """The engines running now and serving, to watch during a soak: service -> (id, up seconds)."""
        containers = await self.ps()
        out: dict[str, tuple[str, float | None]] = {}
        for c in containers:
            svc = c.service or c.name
            if self.rb.replica_of(svc):
                out[svc] = (c.id, up_seconds(c.status))
        return out

    def check_ready_unchanged(self, watched: dict[str, tuple[str, float | None]]) -> str | None:
        """An engine whose cold start passed in this run must still be that container (a resume
        judges what happened while no runner watched)."""
        for svc, cid in self.ctx.ready.items():
            if svc in watched and watched[svc][0] != cid:
                return f"{svc} was replaced since its cold start passed (container {cid[:12]} -> {watched[svc][0][:12]})"
        return None

    async def engines_still_serving(self, watched: dict[str, tuple[str, float | None]]) -> str | None:
        by_svc = by_service(await self.ps())
        for svc, (cid, up) in watched.items():
            c = by_svc.get(svc)
            if c is None:
                return f"{svc} is gone from docker/ps"
            if c.id != cid:
                return f"{svc} was replaced (container ID changed)"
            if c.restarting or c.state != "running":
                return f"{svc} is {c.state} ({c.status})"
            now_up = up_seconds(c.status)
            if up is not None and now_up is not None and now_up < up:
                return f"{svc} restarted (docker/ps: {c.status})"
            if now_up is not None:
                watched[svc] = (cid, now_up)
        return None
