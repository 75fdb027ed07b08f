"""The client's rules for the deployed compose-manager (8e07c35) that the recordings alone do not
pin down: label filtering across projects, the tag-not-found backoff (through the clock seam),
the host reads, reserved project names (client and inventory)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import respx
from fast_retry import immediate_retry

from helpers_compose import BASE, ENV, REQ, TOKEN, error
from orchestrator.hosts.clients.compose_manager import ComposeManagerClient, ComposeRequest
from orchestrator.hosts.clients.errors import MalformedResponse, RequestInvalid, TagNotFound
from orchestrator.hosts.clients.retry import RetryPolicy
from orchestrator.hosts.inventory import load_inventory
from orchestrator.util.user_errors import UserError


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


@pytest.fixture
def router():
    with respx.mock(base_url=BASE, assert_all_called=False) as r:
        yield r


def ps_line(name: str, project: str, state: str = "running") -> str:
    labels = f"com.docker.compose.project={project},com.docker.compose.service={name}"
    return json.dumps({"ID": name[:12], "Names": name, "Image": "img", "State": state, "Status": "Up", "CreatedAt": "t", "Labels": labels})


async def test_ps_filters_every_projects_list_by_labels(router):
    output = "\n".join([ps_line("nginx", "work"), ps_line("nginx-glm", "glm"), ps_line("dcgm-glm53", "work")])
    route = router.get("/docker/ps").respond(json={"status": "ok", "output": output})
    async with ComposeManagerClient(BASE, TOKEN, retry=immediate_retry()) as cm:
        assert [c.name for c in await cm.ps()] == ["nginx", "dcgm-glm53"]
        assert [c.name for c in await cm.ps("glm")] == ["nginx-glm"]
        assert [c.name for c in await cm.ps("other")] == []
    assert all(call.request.method == "GET" and not call.request.content for call in route.calls)


async def test_tag_not_found_is_retried_with_growing_waits_then_names_the_rate_limit(router):
    route = router.post("/compose/up").mock(return_value=error(400, "tag not found: v0.0.300"))
    clock = FakeClock()
    policy = RetryPolicy(tag_not_found_retries=3, tag_not_found_wait_s=10)
    async with ComposeManagerClient(BASE, TOKEN, retry=policy, clock=clock) as cm:
        with pytest.raises(TagNotFound) as err:
            await cm.up(REQ, ENV)
    assert route.call_count == 4 and clock.sleeps == [10, 20, 40]
    assert "rate limit" in str(err.value) and "tag not found: v0.0.300" in str(err.value)


async def test_tag_found_on_a_retry_goes_ahead(router):
    done = httpx.Response(200, content=b'{"event":"done","success":true,"exit_code":0}\n')
    route = router.post("/compose/up").mock(side_effect=[error(400, "tag not found: v0.0.300"), done])
    async with ComposeManagerClient(BASE, TOKEN, retry=immediate_retry(), clock=FakeClock()) as cm:
        assert (await cm.up(REQ, ENV)).status == "success"
    assert route.call_count == 2


async def test_host_reads_are_typed(router):
    router.get("/host/gpu").respond(json={"status": "ok", "gpus": [
        {"index": 1, "memory_total_mb": 143771, "memory_used_mb": 0, "utilization_pct": 0, "claimed_by": []},
        {"index": 0, "memory_total_mb": 143771, "memory_used_mb": 131072, "utilization_pct": 37, "claimed_by": ["model-sg-glm53-w4afp8-tp4-r1"]},
    ]})
    router.get("/host/cache").respond(json={"status": "ok", "volumes": [{"name": "work_huggingface_cache", "size_bytes": 5}],
                                            "weights": ["models--graphistry--GLM-5.3-Flash-W4AFP8"]})
    router.get("/status").respond(json={"status": "ok"})
    async with ComposeManagerClient(BASE, TOKEN, retry=immediate_retry()) as cm:
        gpus = await cm.host_gpu()
        assert [g.index for g in gpus] == [0, 1] and gpus[0].claimed_by == ("model-sg-glm53-w4afp8-tp4-r1",)
        cache = await cm.host_cache()
        assert cache.holds("graphistry/GLM-5.3-Flash-W4AFP8") and not cache.holds("zai-org/GLM-5.3-Flash")
        assert await cm.status() is None
        router.get("/host/gpu").respond(json={"status": "ok", "gpus": [{"index": "zero"}]})
        with pytest.raises(MalformedResponse):
            await cm.host_gpu()


async def test_version_without_projects_and_with_wrong_types(router):
    router.get("/version").respond(json={"status": "ok", "image": "img"})
    async with ComposeManagerClient(BASE, TOKEN, retry=immediate_retry()) as cm:
        info = await cm.version()
        assert info.project().current is None and info.last_attempt.tag is None and dict(info) == {"status": "ok", "image": "img"}
        router.get("/version").respond(json={"status": "ok", "projects": {"work": {"current": {"tag": 3}}}})
        with pytest.raises(MalformedResponse):
            await cm.version()


@pytest.mark.parametrize("project", ["work", "dstack"])
async def test_reserved_projects_are_refused_before_sending(router, project):
    route = router.post("/compose/up")
    async with ComposeManagerClient(BASE, TOKEN, retry=immediate_retry()) as cm:
        with pytest.raises(RequestInvalid, match="omit it for the default project"):
            await cm.up(ComposeRequest(tag="t", file="prod/x.yaml", services=("nginx",), project=project), ENV)
    assert not route.called


@pytest.mark.parametrize("project", ["work", "dstack"])
def test_inventory_refuses_reserved_projects_in_one_line(tmp_path: Path, project: str):
    text = Path("config/hosts.yaml").read_text().replace("    gpus: 8\n", f"    gpus: 8\n    project: {project}\n", 1)
    path = tmp_path / "hosts.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as err:
        load_inventory(path)
    message = str(err.value)
    assert "\n" not in message and "project: omit it for the default project" in message and "gpu02" in message
    path.write_text(text.replace(f"project: {project}", "project: glm"))
    assert load_inventory(path).hosts["gpu02"].project == "glm"

