"""Read-only HTTP (GETs only) for the external gates: a JSON GET of any URL, the in-host inference
proxy's `/backends/list` (ASSUMED: model-proxy's shape, addresses `container:port`), and the GitHub
reads of the PR/CI and attestation gates. Errors are the client taxonomy's.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from orchestrator.hosts.clients.errors import parse_json
from orchestrator.hosts.clients.github import GitHubClient, GitHubUnreachable, _NotFound
from orchestrator.hosts.clients.http_session import HttpSession
from orchestrator.hosts.clients.model_proxy import Backend, parse_backends_list
from orchestrator.hosts.redaction import Redactor

SYSTEM = "http-json"


@dataclass(frozen=True)
class PullRequestStatus:
    commit: str
    number: int | None = None
    merged: bool = False
    head: str | None = None
    #: check run name -> (status, conclusion)
    checks: dict[str, tuple[str, str | None]] = field(default_factory=dict)


@dataclass
class ExternalReads:
    redactor: Redactor
    github: GitHubClient
    transport: httpx.AsyncBaseTransport | None = None

    async def json(self, url: str, token: str | None = None, system: str = SYSTEM) -> Any:
        """One GET; the JSON body of a 2xx answer, else the taxonomy's error naming the status."""
        async with HttpSession("", token, transport=self.transport, timeout_s=20, redactor=self.redactor) as http:
            http.system = system
            response = await http.request("GET", url, headers={"Accept": "application/json"})
        return parse_json(system, response)

    async def proxy_backends(self, base_url: str, token: str | None) -> list[Backend]:
        payload = await self.json(base_url.rstrip("/") + "/backends/list", token, system="in-host proxy")
        return parse_backends_list(payload, "in-host proxy")

    async def pull_request(self, repo: str, tag: str) -> PullRequestStatus | None:
        """The merged (else the first) PR the tag's commit belongs to, with its head's check runs;
        None when the tag does not exist. `GitHubUnreachable` when GitHub cannot answer."""
        gh = self.github
        sha = await gh.tag_commit(repo, tag)
        if sha is None:
            return None
        try:
            pulls: Any = await gh._get(f"/repos/{repo}/commits/{sha}/pulls", want=list)
        except _NotFound:
            pulls = []
        if not pulls:
            return PullRequestStatus(sha)
        pr = next((p for p in pulls if isinstance(p, dict) and p.get("merged_at")), pulls[0])
        head = ((pr.get("head") or {}).get("sha")) or sha
        try:
            runs = await gh._get(f"/repos/{repo}/commits/{head}/check-runs")
        except _NotFound:
            runs = {}
        checks: dict[str, tuple[str, str | None]] = {}
        for run in runs.get("check_runs") or []:
            if isinstance(run, dict) and isinstance(run.get("name"), str):
                checks[run["name"]] = (str(run.get("status")), run.get("conclusion"))
        return PullRequestStatus(sha, pr.get("number"), bool(pr.get("merged_at")), head, checks)

    async def file_sha256(self, repo: str, path: str, tag: str) -> str | None:
        """sha256 of a file's bytes at a tag (GitHub's contents API); None if it is not there."""
        try:
            payload = await self.github._get(f"/repos/{repo}/contents/{quote(path)}?ref={quote(tag, safe='')}")
        except _NotFound:
            return None
        content = payload.get("content")
        if payload.get("encoding") != "base64" or not isinstance(content, str):
            raise GitHubUnreachable("github", f"contents of {path}@{tag} are not base64")
        return hashlib.sha256(base64.b64decode(content)).hexdigest()
