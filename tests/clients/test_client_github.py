"""GitHub tag check: exists, merged to main (compare status behind/identical), old enough; GitHub
that cannot answer is `GitHubUnreachable`, never a verdict."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
import respx
from fast_retry import immediate_retry

from orchestrator.hosts.clients.errors import Unauthorized
from orchestrator.hosts.clients.github import GitHubClient, GitHubUnreachable
from orchestrator_sim.apps.github import build_github_app
from orchestrator_sim.compose_manager.repo import SimRepository
from orchestrator_sim.faults import ActiveFaults

API = "http://gh.test"
REPO = "nearai/cvm-compose-files"
SHA = "92f341e7d0b54c2a8e6f13a9b5c7d2e4f6a8b0c1"
NOW = datetime(2026, 11, 30, 20, 0, tzinfo=UTC)


@pytest.fixture
def router():
    with respx.mock(base_url=API, assert_all_called=False) as r:
        yield r


@pytest.fixture
async def gh(router):
    async with GitHubClient(API, "gh-token", retry=immediate_retry(max_attempts=2)) as c:
        yield c


def tag(router, *, compare: str = "behind", date: str = "2026-11-27T10:00:00Z", annotated: bool = False):
    if annotated:
        router.get(f"/repos/{REPO}/git/ref/tags/v0.0.300").respond(json={"object": {"sha": "t" * 40, "type": "tag"}})
        router.get(f"/repos/{REPO}/git/tags/{'t' * 40}").respond(json={"object": {"sha": SHA, "type": "commit"}})
    else:
        router.get(f"/repos/{REPO}/git/ref/tags/v0.0.300").respond(json={"object": {"sha": SHA, "type": "commit"}})
    router.get(f"/repos/{REPO}/compare/main...{SHA}").respond(json={"status": compare})
    person = {"date": date}
    router.get(f"/repos/{REPO}/commits/{SHA}").respond(json={"sha": SHA, "commit": {"committer": person, "author": person}})


@pytest.mark.parametrize("annotated", [False, True])
async def test_merged_and_old_enough_is_ok(router, gh, annotated):
    tag(router, annotated=annotated)
    check = await gh.check_tag(REPO, "v0.0.300", now=NOW)
    assert (check.ok, check.reason, check.commit) == (True, None, SHA)
    assert check.committed_at == datetime(2026, 11, 27, 10, 0, tzinfo=UTC)
    assert router.calls[0].request.headers["authorization"] == "Bearer gh-token"


async def test_identical_to_main_counts_as_merged(router, gh):
    tag(router, compare="identical")
    assert (await gh.check_tag(REPO, "v0.0.300", now=NOW)).ok


@pytest.mark.parametrize("status", ["ahead", "diverged"])
async def test_unmerged_is_refused(router, gh, status):
    tag(router, compare=status)
    check = await gh.check_tag(REPO, "v0.0.300", now=NOW)
    assert not check.ok and "not merged to main" in check.reason and status in check.reason


async def test_too_recent_is_refused_with_the_date(router, gh):
    tag(router, date="2026-11-30T17:59:35Z")
    check = await gh.check_tag(REPO, "v0.0.300", min_age_hours=48, now=NOW)
    assert not check.ok and "2026-11-30 17:59:35 UTC" in check.reason and "48" in check.reason
    assert (await gh.check_tag(REPO, "v0.0.300", min_age_hours=1, now=NOW)).ok


async def test_missing_tag_is_a_verdict(router, gh):
    router.get(f"/repos/{REPO}/git/ref/tags/v9.9.9").respond(404, json={"message": "Not Found"})
    check = await gh.check_tag(REPO, "v9.9.9", now=NOW)
    assert not check.ok and "does not exist" in check.reason and check.commit is None


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(403, headers={"x-ratelimit-remaining": "0"}, json={"message": "API rate limit exceeded"}),
        httpx.Response(429, json={"message": "slow down"}),
        httpx.Response(503, text="<html>down</html>"),
        httpx.ConnectError("refused"),
    ],
)
async def test_github_that_cannot_answer_is_unreachable_not_a_verdict(router, gh, answer):
    route = router.get(f"/repos/{REPO}/git/ref/tags/v0.0.300")
    route.mock(side_effect=answer) if isinstance(answer, Exception) else route.mock(return_value=answer)
    with pytest.raises(GitHubUnreachable):
        await gh.check_tag(REPO, "v0.0.300", now=NOW)


async def test_bad_token_is_unauthorized(router, gh):
    router.get(f"/repos/{REPO}/git/ref/tags/v0.0.300").respond(401, json={"message": "Bad credentials"})
    with pytest.raises(Unauthorized):
        await gh.check_tag(REPO, "v0.0.300", now=NOW)


async def test_against_the_simulated_github():
    repo = SimRepository.load()
    for faults, ok in (((), True), (("tag-unmerged",), False)):
        app = build_github_app(repo, NOW, ActiveFaults(faults))
        async with GitHubClient("http://gh.sim", transport=httpx.ASGITransport(app=app)) as sim:
            assert (await sim.check_tag(REPO, "v0.0.300", now=NOW)).ok is ok
            recent = await sim.check_tag(REPO, "v0.0.301", now=NOW)
            assert not recent.ok and "too recent" in recent.reason
            assert not (await sim.check_tag(REPO, "v9.9.9", now=NOW)).ok
    app = build_github_app(repo, NOW, ActiveFaults(["github-down"]))
    async with GitHubClient("http://gh.sim", transport=httpx.ASGITransport(app=app), retry=immediate_retry()) as sim:
        with pytest.raises(GitHubUnreachable):
            await sim.check_tag(REPO, "v0.0.300", now=NOW)

