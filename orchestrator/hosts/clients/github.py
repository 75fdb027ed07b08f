"""GitHub REST client: is a compose-files tag fit to deploy?

compose-manager 8e07c35 does not guarantee it (its tag-age gate is off by default, and it never
checks that a tag is merged), so before anything is stopped the orchestrator checks that the tag
exists (annotated tags followed to their commit), points at a commit merged to `main` (compare
status `behind` or `identical`), and was committed (committer date: what a backdated change sets)
at least `min_age_hours` before `now`.

A failed check is `TagCheck(ok=False, reason=...)`. A GitHub that cannot answer (connect failure,
5xx, rate limit) raises `GitHubUnreachable`: a bad tag and an unreachable GitHub cannot be told
apart, so the operator must pass `--skip-tag-age-check` explicitly. A wrong token: `Unauthorized`.
The token (`ORCHESTRATOR_GITHUB_TOKEN`) is optional (public repositories answer 60 requests an hour).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from orchestrator.hosts.clients.errors import ClientError, ServerError, TransportError, Unauthorized
from orchestrator.hosts.clients.http_session import HttpSession
from orchestrator.hosts.clients.retry import RetryPolicy, call_with_retry

SYSTEM = "github"
DEFAULT_API_URL = "https://api.github.com"
MAIN_BRANCH = "main"
MERGED_STATUSES = frozenset({"behind", "identical"})


class GitHubUnreachable(ClientError):
    """The tag is neither good nor bad: GitHub did not answer usefully."""


class _NotFound(Exception):
    pass


@dataclass(frozen=True)
class TagCheck:
    ok: bool
    reason: str | None = None
    commit: str | None = None
    committed_at: datetime | None = None


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value.astimezone(UTC) if value.tzinfo else None


class GitHubClient(HttpSession):
    system = SYSTEM
    timeout_s = 20

    def __init__(self, api_url: str = DEFAULT_API_URL, token: Any = None, *, retry: RetryPolicy | None = None,
                 **session: Any) -> None:
        super().__init__(api_url, token, retry=retry or RetryPolicy(max_attempts=3, deadline_s=30), **session)
        self._http.headers.update({"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"})

    async def _get(self, path: str, want: type = dict) -> dict[str, Any]:
        async def attempt() -> dict[str, Any]:
            response = await self.request("GET", path, any_status=True)
            status = response.status_code
            if status == 404:
                raise _NotFound(path)
            if status == 401:
                raise Unauthorized(SYSTEM, "HTTP 401: bad credentials (check ORCHESTRATOR_GITHUB_TOKEN)", status=401)
            if status in (403, 429):
                limited = response.headers.get("x-ratelimit-remaining") == "0" or status == 429
                what = "rate limit reached" if limited else "access refused"
                raise GitHubUnreachable(SYSTEM, f"HTTP {status}: {what} (set ORCHESTRATOR_GITHUB_TOKEN)", status=status)
            if status >= 500:
                raise ServerError(SYSTEM, f"HTTP {status}", status=status)
            if not response.is_success:
                raise GitHubUnreachable(SYSTEM, f"unexpected HTTP {status} for {path}", status=status)
            try:
                payload = response.json()
            except ValueError:
                raise GitHubUnreachable(SYSTEM, f"answer to {path} is not JSON") from None
            if not isinstance(payload, want):
                raise GitHubUnreachable(SYSTEM, f"answer to {path} is not a JSON {want.__name__}")
            return payload

        try:
            return await call_with_retry(attempt, self.retry, mutating=False, what=f"{SYSTEM} {path}", clock=self._clock)
        except TransportError as exc:
            raise GitHubUnreachable(SYSTEM, f"cannot reach {self.base_url}: {exc.detail}") from None
        except ServerError as exc:
            raise GitHubUnreachable(SYSTEM, exc.detail, status=exc.status) from None

    async def tag_commit(self, repo: str, tag: str) -> str | None:
        """The commit SHA a tag points at (annotated tags followed), or None if there is no such tag."""
        base = f"/repos/{repo}"
        try:
            ref = await self._get(f"{base}/git/ref/tags/{quote(tag, safe='')}")
            obj = ref.get("object") or {}
            for _ in range(5):  # a tag of a tag of ... a commit
                if obj.get("type") != "tag":
                    break
                obj = (await self._get(f"{base}/git/tags/{obj.get('sha')}")).get("object") or {}
        except _NotFound:
            return None
        sha = obj.get("sha")
        if obj.get("type") != "commit" or not isinstance(sha, str) or not sha:
            raise GitHubUnreachable(SYSTEM, f"tag {tag} of {repo} does not resolve to a commit")
        return sha

    async def check_tag(self, repo: str, tag: str, *, min_age_hours: float = 48, now: datetime) -> TagCheck:
        """Exists, merged to main, and committed at least `min_age_hours` before `now` (aware)."""
        if "/" not in repo or repo.count("/") != 1:
            raise ValueError(f"repo must be 'owner/name', not {repo!r}")
        sha = await self.tag_commit(repo, tag)
        if sha is None:
            return TagCheck(False, f"tag {tag} does not exist in {repo}")
        try:
            compare = await self._get(f"/repos/{repo}/compare/{MAIN_BRANCH}...{sha}")
            commit = await self._get(f"/repos/{repo}/commits/{sha}")
        except _NotFound:
            return TagCheck(False, f"commit {sha[:12]} of tag {tag} is not in {repo}'s history", sha)
        info = commit.get("commit") or {}
        committed = (_parse_time((info.get("committer") or {}).get("date"))
                     or _parse_time((info.get("author") or {}).get("date")))
        status = compare.get("status")
        if status not in MERGED_STATUSES:
            return TagCheck(False, f"tag {tag} ({sha[:12]}) is not merged to {MAIN_BRANCH} (compare: {status})",
                            sha, committed)
        if committed is None:
            raise GitHubUnreachable(SYSTEM, f"commit {sha[:12]} has no commit date")
        if now - committed < timedelta(hours=min_age_hours):
            age_h = (now - committed).total_seconds() / 3600
            return TagCheck(False, f"tag {tag} is too recent: committed {committed:%Y-%m-%d %H:%M:%S} UTC, "
                                   f"{age_h:.1f} h ago (less than {min_age_hours:g} h)", sha, committed)
        return TagCheck(True, None, sha, committed)
