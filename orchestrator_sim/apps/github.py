"""The GitHub REST API, as much of it as the orchestrator's tag check uses, for the simulated
compose-files repository (`compose/tags.yaml`): the same tags and commits compose-manager's
simulated tag gate sees, so the two always agree.

Routes (shapes as GitHub's REST API v3 answers them, trimmed to the fields used):
- `GET /repos/{owner}/{repo}/git/ref/tags/{tag}`: `{"ref","object":{"sha","type":"commit"}}`
  (every simulated tag is lightweight), 404 `{"message":"Not Found"}` for an unknown tag.
- `GET /repos/{owner}/{repo}/git/tags/{sha}`: 404 (no annotated tags here).
- `GET /repos/{owner}/{repo}/commits/{ref}`: `{"sha","commit":{"author":{"date"},"committer":{"date"}}}`
  for a tag, a commit SHA or `main`; 422 `No commit found for SHA: x` otherwise.
- `GET /repos/{owner}/{repo}/compare/{base}...{head}`: `{"status","ahead_by","behind_by"}`: every tag
  is merged to main (`behind`; `identical` for main itself) unless the `tag-unmerged` fault makes
  v0.0.300 `diverged`.

A tag's commit date is the simulation's start minus the tag's `age_hours` (so the `tag-too-recent`
fault shows here too). `github-down` answers 503 to everything.
"""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime, timedelta
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from orchestrator_sim.compose_manager.repo import TARGET_TAG, SimRepository
from orchestrator_sim.faults import ActiveFaults

MAIN = "main"
DOCS = "https://docs.github.com/rest"
_HEADERS = {"x-ratelimit-limit": "5000", "x-ratelimit-remaining": "4999"}


def _answer(payload: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(payload, status_code=status, headers=_HEADERS)


def _not_found() -> JSONResponse:
    return _answer({"message": "Not Found", "documentation_url": DOCS, "status": "404"}, 404)


def build_github_app(repo: SimRepository, epoch: datetime, faults: ActiveFaults) -> Starlette:
    main_sha = hashlib.sha1(f"{repo.name} main".encode()).hexdigest()
    by_sha = {t.commit: t for t in repo.tags.values()}

    def date(age_hours: float) -> str:
        return (epoch - timedelta(hours=age_hours)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def resolve(ref: str) -> tuple[str, float] | None:
        """(sha, age in hours) of a tag name, a tag's commit SHA or `main`."""
        if ref == MAIN or ref == main_sha:
            newest = min((t.age_hours for t in repo.tags.values()), default=0.0)
            return main_sha, max(0.0, newest - 1.0)
        info = repo.tags.get(ref) or by_sha.get(ref)
        return (info.commit, info.age_hours) if info else None

    def unmerged(sha: str) -> bool:
        target = repo.tags.get(TARGET_TAG)
        return faults.active("tag-unmerged") and target is not None and sha == target.commit

    async def guard(request: Request) -> Response | None:
        if faults.active("github-down"):
            return Response("<html><body><h1>503 Service Unavailable</h1></body></html>", 503, media_type="text/html")
        full = f"{request.path_params['owner']}/{request.path_params['repo']}"
        return None if full == repo.name else _not_found()

    async def git_ref(request: Request) -> Response:
        if (refused := await guard(request)) is not None:
            return refused
        tag = request.path_params["tag"]
        info = repo.tags.get(tag)
        if info is None:
            return _not_found()
        full = request.path_params["owner"] + "/" + request.path_params["repo"]
        return _answer(
            {
                "ref": f"refs/tags/{tag}",
                "url": f"{request.base_url}repos/{full}/git/refs/tags/{tag}",
                "object": {"sha": info.commit, "type": "commit", "url": f"{request.base_url}repos/{full}/git/commits/{info.commit}"},
            }
        )

    async def git_tag(request: Request) -> Response:
        if (refused := await guard(request)) is not None:
            return refused
        return _not_found()

    async def commit(request: Request) -> Response:
        if (refused := await guard(request)) is not None:
            return refused
        ref = request.path_params["ref"]
        found = resolve(ref)
        if found is None:
            return _answer({"message": f"No commit found for SHA: {ref}", "documentation_url": DOCS, "status": "422"}, 422)
        sha, age = found
        person = {"name": "compose-files bot", "email": "bot@example.invalid", "date": date(age)}
        return _answer({"sha": sha, "commit": {"author": person, "committer": person, "message": f"release {ref}"}})

    async def compare(request: Request) -> Response:
        if (refused := await guard(request)) is not None:
            return refused
        base, _, head = request.path_params["spec"].partition("...")
        b, h = resolve(base), resolve(head)
        if b is None or h is None:
            return _not_found()
        if b[0] == h[0]:
            status, ahead, behind = "identical", 0, 0
        elif base in (MAIN, main_sha) and unmerged(h[0]):
            status, ahead, behind = "diverged", 1, 3
        elif base in (MAIN, main_sha):
            status, ahead, behind = "behind", 0, 1 + sum(1 for t in repo.tags.values() if t.age_hours < h[1])
        else:
            status, ahead, behind = ("ahead", 1, 0) if h[1] < b[1] else ("behind", 0, 1)
        return _answer({"status": status, "ahead_by": ahead, "behind_by": behind, "total_commits": ahead,
                        "merge_base_commit": {"sha": h[0] if status == "behind" else b[0]}})

    async def pulls(request: Request) -> Response:
        """`commits/{sha}/pulls` (issue 23): the PR each tag's commit came from, merged to main
        unless `pr-unmerged`."""
        if (refused := await guard(request)) is not None:
            return refused
        found = resolve(request.path_params["sha"])
        if found is None:
            return _answer({"message": "No commit found", "documentation_url": DOCS, "status": "422"}, 422)
        sha, age = found
        if sha == main_sha:
            return _answer([])
        number = 100 + int(sha[:6], 16) % 900
        merged = not faults.active("pr-unmerged")
        return _answer([{"number": number, "state": "closed" if merged else "open", "merged_at": date(age) if merged else None,
                         "head": {"sha": hashlib.sha1(f"{sha} head".encode()).hexdigest(), "ref": f"release-{number}"},
                         "base": {"ref": MAIN}}])

    async def check_runs(request: Request) -> Response:
        """`commits/{sha}/check-runs`: the compose-files CI (validate, lint); `ci-failing` fails
        validate, `ci-pending` leaves it in progress."""
        if (refused := await guard(request)) is not None:
            return refused
        validate = {"name": "validate", "status": "completed", "conclusion": "success"}
        if faults.active("ci-failing"):
            validate["conclusion"] = "failure"
        if faults.active("ci-pending"):
            validate.update(status="in_progress", conclusion=None)
        runs = [validate, {"name": "lint", "status": "completed", "conclusion": "success"}]
        return _answer({"total_count": len(runs), "check_runs": runs})

    async def contents(request: Request) -> Response:
        """`contents/{path}?ref=<tag>`: a compose file's bytes at a tag, base64 (as GitHub)."""
        if (refused := await guard(request)) is not None:
            return refused
        path, ref = request.path_params["path"], request.query_params.get("ref", MAIN)
        text = repo.file_text(ref, path)
        if text is None:
            return _not_found()
        raw = text.encode()
        return _answer({"type": "file", "encoding": "base64", "path": path, "size": len(raw),
                        "sha": hashlib.sha1(b"blob %d\0" % len(raw) + raw).hexdigest(),
                        "content": base64.b64encode(raw).decode()})

    prefix = "/repos/{owner}/{repo}"
    return Starlette(
        routes=[
            Route(prefix + "/commits/{sha}/pulls", pulls, methods=["GET"]),
            Route(prefix + "/commits/{sha}/check-runs", check_runs, methods=["GET"]),
            Route(prefix + "/contents/{path:path}", contents, methods=["GET"]),
            Route(prefix + "/git/ref/tags/{tag:path}", git_ref, methods=["GET"]),
            Route(prefix + "/git/tags/{sha}", git_tag, methods=["GET"]),
            Route(prefix + "/commits/{ref:path}", commit, methods=["GET"]),
            Route(prefix + "/compare/{spec:path}", compare, methods=["GET"]),
        ]
    )
