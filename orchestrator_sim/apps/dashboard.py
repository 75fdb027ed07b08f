"""The gpu-manager dashboard: the source of truth for each host's full env map."""

from __future__ import annotations

import copy
from threading import RLock
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from orchestrator_sim.apps.common import bearer_ok, json_body


class DashboardState:
    def __init__(self, instances: list[dict[str, Any]]) -> None:
        self._lock = RLock()
        self._instances = instances

    def instances(self) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(self._instances)

    def env_vars(self, name: str) -> dict[str, str]:
        with self._lock:
            for inst in self._instances:
                if inst["name"] == name:
                    return dict(inst["env_vars"])
        raise KeyError(name)

    def replace_env(self, instance_id: str, env: dict[str, str]) -> bool:
        with self._lock:
            for inst in self._instances:
                if inst["id"] == instance_id:
                    inst["env_vars"] = dict(env)
                    return True
        return False


def build_dashboard_app(state: DashboardState, token: str) -> Starlette:
    async def instances(request: Request) -> Response:
        if not bearer_ok(request, token):
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return JSONResponse(state.instances())

    async def put_env(request: Request) -> Response:
        if not bearer_ok(request, token):
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        body = await json_body(request)
        env = body.get("env_vars", body) if isinstance(body, dict) else None
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            return JSONResponse({"error": "body must be an object of strings"}, status_code=400)
        if not state.replace_env(request.path_params["instance_id"], env):
            return JSONResponse({"error": "instance not found"}, status_code=404)
        return JSONResponse({"status": "ok"})

    return Starlette(
        routes=[
            Route("/api/instances", instances, methods=["GET"]),
            Route("/api/instances/{instance_id}/env", put_env, methods=["PUT"]),
        ]
    )
