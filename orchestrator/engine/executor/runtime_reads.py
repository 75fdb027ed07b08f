"""What a step handler reads from the host and its neighbours (a part of `Runtime`, runtime.py).

docker/ps, compose-manager's action log, version, host cache and GPU claims; the model-proxy peers'
presence lists; one completion through the inference route; the soak relay; an engine's log (the
file it is read through, and a follower over it); the placement observation. Reads only: nothing
here changes the host.
"""

from __future__ import annotations

from typing import Any

from orchestrator.hosts.clients.errors import ClientError
from orchestrator.hosts.logfollow import LogFollower
from orchestrator.hosts.parsers.docker_ps import Container
from orchestrator.engine.steps.outcome import StepOutcome, fail, halt

#: The first window of an engine's log: wide enough to hold a whole cold start, so a resumed gate
#: judges the start from the container's first line.
COLD_START_WINDOW = 4000


class RuntimeReads:
    """Host and neighbour reads; uses Runtime's clients, entry, runbook and context."""

    async def ps(self) -> list[Container]:
        return await self.clients.compose.ps(self.entry.project)

    async def action_count(self) -> int:
        actions = await self.clients.compose.action_log()
        self._fresh_actions = actions  # the foreign-change check of the call that follows uses this read
        return len(actions)

    async def version_summary(self) -> dict[str, Any]:
        try:
            return {k: v for k, v in (await self.clients.compose.version()).items() if k in ("tag", "commit", "file")}
        except ClientError as exc:
            return {"error": type(exc).__name__}

    async def host_cache(self) -> Any | None:
        """`GET /host/cache`, or None where compose-manager does not offer it (or it failed)."""
        reader = getattr(self.clients.compose, "host_cache", None)
        if reader is None:
            return None
        try:
            return await reader()
        except ClientError:
            return None

    async def gpu_holders(self, replica: str | None) -> dict[int, set[str]] | None:
        """GPU index -> the containers holding it, for the replica's GPUs (None: not offered)."""
        gpus = self.rb.replica_gpus.get(replica or "")
        reader = getattr(self.clients.compose, "host_gpu", None)
        if not gpus or reader is None:
            return None
        try:
            info = await reader()
        except ClientError:
            return None
        by_index = {g.index: set(g.claimed_by) for g in info}
        return {i: by_index.get(i, set()) for i in gpus}

    async def peer_presence(self) -> tuple[dict[str, Any], list[str]]:
        addr = self.entry.model_proxy_address
        peers: dict[str, Any] = {}
        problems = []
        for peer in self.clients.peers:
            for label, domain in (("long", self.rb.domains.long), ("base", self.rb.domains.base)):
                p = await peer.presence(addr, domain)
                peers[f"{peer.name}/{label}"] = {"listed": p.listed, "healthy": p.healthy}
            if not (peers[f"{peer.name}/long"]["listed"] and peers[f"{peer.name}/long"]["healthy"]):
                problems.append(f"{peer.name} does not list {addr} healthy under {self.rb.domains.long}")
            if peers[f"{peer.name}/base"]["listed"]:
                problems.append(f"{peer.name} lists {addr} under the base domain {self.rb.domains.base}")
        return peers, problems

    async def completion_once(self) -> dict[str, Any]:
        try:
            done = await self.clients.inference.completion(
                self.rb.model, [{"role": "user", "content": "Reply with the word ready."}], max_tokens=8
            )
            return {"ok": True, "prompt_tokens": done.prompt_tokens}
        except ClientError as exc:
            return {"ok": False, "reason": self.scrub(f"{type(exc).__name__}: {exc}")}

    def relay_client(self, port: int, token: str) -> Any:
        return self.clients.relay(self.entry.relay_url(port), token)

    def prometheus_client(self) -> Any:
        """The inventory's Prometheus query API for this host (`prometheus_url`; issue 23)."""
        from orchestrator.hosts.clients.prometheus import PrometheusQueryClient

        assert self.entry.prometheus_url is not None
        return PrometheusQueryClient(str(self.entry.prometheus_url))

    def service_file(self, service: str) -> str:
        """The compose file a service's logs are read through: the file that deployed it (this run,
        or the action log's previous deploy), else the file of a `previous:` request that names it
        (the base tier's FP8 r2 comes with `previous:model-sg-glm53-fp8-tp4-r1`), else the new file."""
        known = (self.ctx.deployed.get(service) or self.ctx.previous.get(service)
                 or self.ctx.previous.get(self._previous_ref_of.get(service, "")))
        return known["file"] if known else self.rb.file

    def follower(self, service: str, *, initial_tail: int = COLD_START_WINDOW) -> LogFollower:
        file = self.service_file(service)
        project = self.entry.project

        async def fetch(tail: int) -> str:
            return await self.clients.compose.logs(file, [service], tail, project)

        return LogFollower(fetch, initial_tail=initial_tail, max_tail=max(initial_tail, 5000))

    async def observe_host(self) -> dict[str, str] | StepOutcome:
        from orchestrator.engine.executor.placement import PlacementError, observe_host

        env = await self.ensure_env()
        try:
            return await observe_host(
                self.clients.compose, env, self.rb, self.run.tag or "", self.entry.project,
                on_dry_run=lambda req, out: self.journal_read("dry_run", req, {"status": out.status, "exit_code": out.exit_code,
                                                                                "lines": [self.scrub(x) for x in out.lines[-40:]]}))
        except PlacementError as exc:
            return halt(str(exc)) if exc.changed else fail(str(exc))
