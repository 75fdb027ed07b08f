"""What docker shows of the simulated host's containers: their status strings, `ContainerView`s,
their logs, `docker ps` lines and `docker compose logs` output (read-only, under the host's lock)."""

from __future__ import annotations

from orchestrator_sim.compose_manager.repo import NGINX_SERVICE, PROXY_SERVICE, RELAY_SERVICE
from orchestrator_sim.host import docker_format
from orchestrator_sim.host.containers import PROJECT, Container, ContainerView
from orchestrator_sim.host.state import REGISTRAR_HEALTH_START_S, HostState


class HostDockerView(HostState):
    """docker's view of the containers (read-only)."""

    def _status(self, c: Container) -> str:
        now = self._now
        if c.state == "running":
            s = "Up " + docker_format.human_duration(now - (c.started_at or now))
            if c.has_healthcheck:
                s += " (health: starting)" if now - (c.started_at or now) < REGISTRAR_HEALTH_START_S else " (healthy)"
            return s
        if c.state == "restarting":
            return f"Restarting ({c.exit_code}) {docker_format.human_duration(now - (c.finished_at or now))} ago"
        if c.state == "exited":
            return f"Exited ({c.exit_code}) {docker_format.human_duration(now - (c.finished_at or now))} ago"
        if c.state == "removing":
            return "Removal In Progress"
        if c.state == "dead":
            return "Dead"
        return "Created"

    def _view(self, c: Container) -> ContainerView:
        return ContainerView(
            id=c.id,
            name=c.name,
            service=c.service,
            project=c.project,
            image=c.image,
            state=c.state,
            status=self._status(c),
            created_at=c.created_at,
            started_at=c.started_at,
            finished_at=c.finished_at,
            exit_code=c.exit_code,
            restart_count=c.restart_count,
            tag=c.tag,
            file=c.file,
            config_hash=c.config_hash,
            slot=c.slot,
            ready=c.ready,
            stopping=c.stopping,
            booked_bytes=c.engine.booked_bytes if c.engine else 0,
        )

    def containers(self, project: str | None = None) -> list[ContainerView]:
        with self._lock:
            self.sync()
            return [
                self._view(c)
                for c in sorted(self._containers.values(), key=lambda c: c.name)
                if project is None or c.project == project
            ]

    def container(self, name: str) -> ContainerView | None:
        with self._lock:
            self.sync()
            c = self._containers.get(name)
            return self._view(c) if c else None

    def logs(self, name: str) -> list[str]:
        with self._lock:
            self.sync()
            c = self._containers.get(name)
            return list(c.log) if c else []

    def last_log(self, name: str) -> list[str]:
        """The log of container `name`, or of the last one removed under that name (for tests:
        compose/logs no longer shows a removed container, e.g. the registrar after a drain)."""
        with self._lock:
            self.sync()
            c = self._containers.get(name)
            return list(c.log) if c else list(self._removed_logs.get(name, []))

    def booked_bytes(self) -> int:
        with self._lock:
            self.sync()
            return self._booked()

    def ps_lines(self, project: str | None = None, services: list[str] | None = None) -> list[str]:
        with self._lock:
            self.sync()
            out = []
            for c in sorted(self._containers.values(), key=lambda c: c.created_at, reverse=True):
                if c.state not in ("running", "restarting"):
                    continue  # plain `docker ps` (no -a): exited, created, removing, dead not listed
                if project and c.project != project:
                    continue
                if services and c.service not in services:
                    continue
                out.append(docker_format.ps_line(self._ps_fields(c)))
            return out

    def _ps_fields(self, c: Container) -> dict[str, object]:
        ports = ""
        if c.state == "running":
            if c.service == NGINX_SERVICE:  # the ports its file publishes (gpu02's also 8001)
                ports = ", ".join(f"0.0.0.0:{h}->{p}/tcp" for h, p in sorted(c.ports))
            elif c.service == RELAY_SERVICE:
                ports = "0.0.0.0:8008-8009->8008-8009/tcp"
            elif c.engine is not None or c.service == PROXY_SERVICE:
                ports = "8000/tcp"
        command = c.command.split()
        shown = " ".join(command[:3])
        return {
            "Command": '"' + (shown[:20] + "…" if len(shown) > 20 else shown) + '"',
            "CreatedAt": docker_format.created_at(self.wall(c.created_at)),
            "ID": c.id,
            "Image": c.image,
            "Labels": docker_format.labels_string(c.labels),
            "LocalVolumes": "2" if c.engine is not None else "0",
            "Mounts": "kernel_cache,huggingface_cache" if c.engine is not None else "",
            "Names": c.name,
            "Networks": f"{c.project}_default",
            "Ports": ports,
            "RunningFor": docker_format.human_duration(self._now - c.created_at) + " ago",
            "Size": "0B",
            "State": c.state,
            "Status": self._status(c),
        }

    def compose_logs(self, services: list[str], tail: int, project: str = PROJECT) -> str:
        with self._lock:
            self.sync()
            found = [c for c in self._containers.values() if c.service in services and c.project == project]
            found.sort(key=lambda c: services.index(c.service))
            if not found:
                return ""
            width = max(len(c.name) for c in found) + 1
            lines = []
            for c in found:
                for line in c.log[-tail:] if tail > 0 else []:
                    lines.append(f"{c.name:<{width}} | {line}")
            return "\n".join(lines) + ("\n" if lines else "")
