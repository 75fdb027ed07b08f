"""The files and maps a fleet hands out: the orchestrator's inventory and environment
(`inventory_yaml`, `write_inventory`, `env_for_orchestrator`) and the dashboard's instance list
(`_instances`). A mixin of `SimFleet` (sim_fleet.py), which owns the attributes read here."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator_sim.fleet.config import LOOPBACK, FleetTokens, FleetUrls, SimConfig, _secret
from orchestrator_sim.host.containers import MODEL_PROXY_PORT

if TYPE_CHECKING:
    from orchestrator_sim.host.sim_host import SimHost


class FleetFiles:
    """The inventory, the orchestrator's env and the dashboard's instances of a `SimFleet`."""

    config: SimConfig
    tokens: FleetTokens
    urls: FleetUrls
    hosts: dict[str, SimHost]
    host_urls: dict[str, FleetUrls]
    _envs: dict[str, dict[str, str]]
    _inventory_path: Path | None
    _tmp: tempfile.TemporaryDirectory[str] | None

    def inventory_yaml(self) -> str:
        """The orchestrator's inventory: the dashboard, both peers, and every simulated host."""
        return (
            f"dashboard_url: {self.urls.dashboard}\n"
            "model_proxy_peers:\n" + "".join(f"  {name}: {url}\n" for name, url in self.urls.peers.items()) + "hosts:\n"
            + "".join(self._inventory_entry(name) for name in self.hosts)
        )

    def _inventory_entry(self, name: str) -> str:
        urls, host = self.host_urls[name], self.hosts[name]
        relay_ports = {p: int(u.rsplit(":", 1)[1]) for p, u in urls.relay.items()}
        relay_ports[8000] = int(urls.proxy.rsplit(":", 1)[1])  # issue 23: the in-host proxy's /backends/list
        return (
            f"  {name}:\n"
            f"    compose_manager_url: {urls.compose_manager}\n"
            f"    instance_name: {name}\n"
            f"    model_proxy_address: {host.host_ip}:{MODEL_PROXY_PORT}\n"
            f"    inference_endpoint: {urls.inference}\n"
            f"    soak_relay_base_url: http://{LOOPBACK}\n"
            "    soak_relay_port_map: {" + ", ".join(f"{p}: {q}" for p, q in relay_ports.items()) + "}\n"
            f"    available_ram_gib: {self.config.available_ram_gib:g}\n"
            f'    available_ram_source: "simulated {name} (MemAvailable at boot)"\n'
            "    gpus: 8\n"
            f"    github_repo: {host.repo.name}\n"
            + (f"    prometheus_url: {urls.prometheus}\n" if urls.prometheus else "")
        )

    def write_inventory(self, path: Path | str) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.inventory_yaml())
        self._inventory_path = path
        return path

    def env_for_orchestrator(self, inventory_path: Path | str | None = None) -> dict[str, str]:
        if inventory_path is not None:
            path = self.write_inventory(inventory_path)
        elif self._inventory_path is not None:
            path = self._inventory_path
        else:
            self._tmp = self._tmp or tempfile.TemporaryDirectory(prefix="orchestrator-sim-")
            path = self.write_inventory(Path(self._tmp.name) / "inventory.yaml")
        return {
            "ORCHESTRATOR_COMPOSE_MANAGER_TOKEN": self.tokens.compose_manager,
            "ORCHESTRATOR_DASHBOARD_TOKEN": self.tokens.dashboard,
            "ORCHESTRATOR_MODEL_PROXY_TOKEN": self.tokens.model_proxy,
            "ORCHESTRATOR_INFERENCE_TOKEN": self.tokens.inference,
            "ORCHESTRATOR_GITHUB_API_URL": self.urls.github,
            "ORCHESTRATOR_INVENTORY": str(path),
        }

    def _instances(self, rng: random.Random) -> list[dict[str, Any]]:
        """Every simulated host (its compose-manager URL, its env map), gpu02 always (as an
        instance elsewhere when not simulated), then gpu13 and gpu03 unless simulated."""

        def other(name: str, ip: str, extra: dict[str, str]) -> dict[str, Any]:
            return {
                "id": f"inst-{name}",
                "name": name,
                "url": f"http://{LOOPBACK}:9",
                "bearer_token": "***",
                "github_repo": "nearai/cvm-compose-files",
                "env_vars": {
                    "HOST_IP": ip,
                    "CVM_HOST": f"h200-{name}",
                    "CVM_NAME": name,
                    "DD_HOSTNAME": name,
                    "ENV": "prod",
                    "PROXY_TOKEN": _secret(rng, 48),
                    "MODEL_PROXY_TOKEN": _secret(rng, 48),
                    "HUGGING_FACE_HUB_TOKEN": "hf_" + _secret(rng, 34),
                    "MONITORING_INGEST_TOKEN": _secret(rng, 40),
                    **extra,
                },
            }

        def simulated(name: str) -> dict[str, Any]:
            return {
                "id": f"inst-{name}",
                "name": name,
                "url": self.host_urls[name].compose_manager if name in self.hosts else f"http://{LOOPBACK}:9",
                "bearer_token": "***",
                "github_repo": "nearai/cvm-compose-files",
                "env_vars": self._envs[name],
            }

        out = [simulated("gpu02")]
        out.append(other("gpu13", "203.0.113.13", {"LONG_TIER_ONLY": "false", "GLM53_HICACHE_RAM_BUDGET": "20%"}))
        if "gpu03" not in self.hosts:
            out.append(other("gpu03", "203.0.113.3", {}))
        out += [simulated(n) for n in self.hosts if n != "gpu02"]
        return out
