"""Client for the gpu-manager dashboard, the source of truth of each host's full env map.

`GET /api/instances` answers `[{"id","name","url","bearer_token","github_repo","env_vars":{...}}]`.
The env map is kept exactly as read: a value that is not a string is refused (naming the instance
and the key), never converted. Every env value and `bearer_token` read joins the `Redactor`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog

from orchestrator.hosts.clients.errors import HostListedTwice, HostNotFound, MalformedResponse
from orchestrator.hosts.clients.http_session import HttpSession
from orchestrator.hosts.envmap import EnvMap
from orchestrator.hosts.redaction import Redactor

log = structlog.get_logger(__name__)

SYSTEM = "dashboard"


@dataclass(frozen=True)
class Instance:
    id: str
    name: str
    env: EnvMap
    env_present: bool = True


def parse_instances(payload: Any, redactor: Redactor) -> list[Instance]:
    """The dashboard's instance list. Accepts a JSON list (documented) or `{"instances": [...]}`."""
    if isinstance(payload, dict) and isinstance(payload.get("instances"), list):
        payload = payload["instances"]
    if not isinstance(payload, list):
        raise MalformedResponse(SYSTEM, f"/api/instances answered a JSON {type(payload).__name__}, expected a list")
    instances: list[Instance] = []
    for index, item in enumerate(payload):
        if not isinstance(item, dict):
            raise MalformedResponse(SYSTEM, f"instance {index} is not an object")
        name = item.get("name")
        url = item.get("url")
        if not isinstance(name, str) or not name:
            raise MalformedResponse(SYSTEM, f"instance {index} has no name")
        if not isinstance(url, str) or not url:
            raise MalformedResponse(SYSTEM, f"instance {name!r} has no url")
        raw_env = item.get("env_vars")
        env_present = raw_env is not None
        raw_env = raw_env if env_present else {}
        if not isinstance(raw_env, dict):
            raise MalformedResponse(SYSTEM, f"instance {name!r}: env_vars is not an object")
        for key, value in raw_env.items():
            if not isinstance(value, str):  # name the key, never the value
                raise MalformedResponse(SYSTEM, f"instance {name!r}: env var {key!r} is a {type(value).__name__}, "
                                                "expected a string")
        env = EnvMap(raw_env)
        redactor.add(*env.redaction_values())
        token = item.get("bearer_token")
        if isinstance(token, str) and set(token) != {"*"}:  # `***`: the dashboard's redacted view
            redactor.add(token)
        instances.append(Instance(id=str(item.get("id", "")), name=name, env=env, env_present=env_present))
    return instances


class DashboardClient(HttpSession):
    system = SYSTEM
    empty_token = "empty dashboard token"

    async def list_instances(self) -> list[Instance]:
        payload = await self._read_json("GET", "/api/instances", what="dashboard instances")
        instances = parse_instances(payload, self.redactor)
        log.info("dashboard.instances", count=len(instances))
        return instances

    async def env_map(self, name: str) -> EnvMap:
        """The env map of the one instance with this name: HostNotFound / HostListedTwice, and
        MalformedResponse when it lists no env_vars."""
        instances = await self.list_instances()
        host = repr(name)
        matches = [i for i in instances if i.name == name]
        if not matches:
            known = ", ".join(sorted(i.name for i in instances)) or "none"
            raise HostNotFound(SYSTEM, f"the dashboard lists no instance {host} (instances: {known})")
        if len(matches) > 1:
            ids = ", ".join(f"{i.id or '?'} ({i.name})" for i in matches)
            raise HostListedTwice(
                SYSTEM,
                f"the dashboard lists instance {host} {len(matches)} times (ids: {ids}); "
                "which env map is the host's is unknowable: fix the dashboard",
            )
        found = matches[0]
        log.info("dashboard.instance", **self.redactor.scrub_obj(dict(name=found.name, id=found.id, env_keys=len(found.env))))
        if not found.env_present:
            raise MalformedResponse(SYSTEM, f"instance {found.name!r} has no env_vars: its full env map is unknown")
        return found.env
