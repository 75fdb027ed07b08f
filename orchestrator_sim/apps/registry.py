"""A compose-hash registry (issue 23's read-only HTTP/JSON gate): the sha256 of every compose
file at every tag of the simulated repository, as a registration service would list the files
allowed to run on a CVM. `hash-unregistered` answers an empty list (the file was never registered).

- `GET /v1/compose-hashes` -> `{"hashes": ["<sha256>", ...], "entries": [{"tag", "file", "sha256"}]}`.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from orchestrator_sim.compose_manager.repo import SimRepository, sha256_text
from orchestrator_sim.faults import ActiveFaults


def build_registry_app(repo: SimRepository, faults: ActiveFaults) -> Starlette:
    async def hashes(request: Request) -> Response:
        entries = []
        if not faults.active("hash-unregistered"):
            for tag in sorted(repo.tags):
                for f in repo.tags[tag].files:
                    text = repo.file_text(tag, f)
                    if text is not None:
                        entries.append({"tag": tag, "file": f, "sha256": sha256_text(text)})
        return JSONResponse({"hashes": sorted({e["sha256"] for e in entries}), "entries": entries})

    return Starlette(routes=[Route("/v1/compose-hashes", hashes, methods=["GET"])])
