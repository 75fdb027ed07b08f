import httpx
import pytest
import respx
from fast_retry import immediate_retry

from orchestrator.hosts.clients.dashboard import DashboardClient
from orchestrator.hosts.clients.errors import (
    HostListedTwice,
    HostNotFound,
    MalformedResponse,
    RequestInvalid,
    Unauthorized,
)
from orchestrator.hosts.clients.model_proxy import ModelProxyClient, parse_backends_list
from orchestrator.hosts.envmap import EnvMap

DASH = "http://dashboard.test"
DASH_TOKEN = "dash-token-abcdef123456"
FAST = immediate_retry()

GPU02_ENV = {"PROXY_TOKEN": "proxy-secret-xyz", "ENV": "prod", "HOST_IP": "10.0.0.2", "GLM53_HICACHE_RAM_BUDGET": "406GiB"}
INSTANCES = [
    {"id": 1, "name": "gpu02", "url": "https://gpu02.cvm.test:8080/", "bearer_token": "host-bearer-secret-1",
     "github_repo": "nearai/cvm-compose-files", "env_vars": GPU02_ENV},
    {"id": 2, "name": "gpu13", "url": "https://gpu13.cvm.test:8080", "bearer_token": "***", "github_repo": "r", "env_vars": {"ENV": "prod"}},
    {"id": 3, "name": "gpu07", "url": "https://gpu07.cvm.test:8080", "bearer_token": "***", "github_repo": "r", "env_vars": {}},
    {"id": 4, "name": "gpu07", "url": "https://gpu07b.cvm.test:8080", "bearer_token": "***", "github_repo": "r", "env_vars": {}},
    {"id": 5, "name": "gpu99", "url": "https://gpu99.cvm.test:8080", "bearer_token": "***", "github_repo": "r"},
]


@pytest.fixture
def dash_router():
    with respx.mock(base_url=DASH, assert_all_called=False) as r:
        r.get("/api/instances").mock(return_value=httpx.Response(200, json=INSTANCES))
        yield r


async def test_instance_by_name_keeps_the_env_map_exactly(dash_router):
    async with DashboardClient(DASH, DASH_TOKEN, retry=FAST) as dash:
        assert (await dash.env_map(name="gpu02")).as_body() == GPU02_ENV
        inst = next(i for i in await dash.list_instances() if i.name == "gpu02")
        assert inst.env == EnvMap(GPU02_ENV) and inst.env.as_body() == GPU02_ENV
        assert inst.id == "1" and inst.name == "gpu02"
        assert await dash.env_map(name="gpu13") == EnvMap({"ENV": "prod"})
    request = dash_router.routes[0].calls.last.request
    assert request.headers["authorization"] == f"Bearer {DASH_TOKEN}"
    text = repr(inst) + str(inst)
    for secret in ("host-bearer-secret-1", "proxy-secret-xyz", "10.0.0.2", "406GiB"):
        assert secret not in text
    assert "PROXY_TOKEN" in text
    assert dash.redactor.scrub("host-bearer-secret-1 proxy-secret-xyz") == "*** ***"


async def test_host_not_found_and_listed_twice_name_the_host(dash_router):
    async with DashboardClient(DASH, DASH_TOKEN, retry=FAST) as dash:
        with pytest.raises(HostNotFound) as err:
            await dash.env_map(name="gpu42")
        assert "gpu42" in str(err.value) and "gpu02" in str(err.value)
        with pytest.raises(HostListedTwice) as err:
            await dash.env_map(name="gpu07")
        assert "gpu07" in str(err.value) and "2 times" in str(err.value)
        with pytest.raises(MalformedResponse):
            await dash.env_map(name="gpu99")  # no env_vars at all: the full map is unknown


async def test_non_string_env_value_is_refused_naming_the_key():
    with respx.mock(base_url=DASH) as r:
        r.get("/api/instances").mock(return_value=httpx.Response(200, json=[{"id": 1, "name": "h", "url": "u", "env_vars": {"PORT": 80123}}]))
        async with DashboardClient(DASH, DASH_TOKEN, retry=FAST) as dash:
            with pytest.raises(MalformedResponse) as err:
                await dash.list_instances()
    assert "PORT" in str(err.value) and "80123" not in str(err.value)


async def test_dashboard_401():
    with respx.mock(base_url=DASH) as r:
        r.get("/api/instances").mock(return_value=httpx.Response(401, json={"error": "bad token"}))
        async with DashboardClient(DASH, DASH_TOKEN, retry=FAST) as dash:
            with pytest.raises(Unauthorized):
                await dash.list_instances()


# ------------------------------------------------------------------ model-proxy

PEER = "http://mp1.test"
LONG = "glm-5-3-flash-long.completions.near.ai"
BASE_DOMAIN = "glm-5-3-flash.completions.near.ai"


def test_backends_list_ASSUMED_shape_is_parsed_tolerating_extra_fields():
    """ASSUMPTION (interfaces.md): /backends/list answers
    {"domain", "backends": [{"address", "healthy", ...}]}. If this test's input stops matching the
    real service, parse_backends_list is the one place to change."""
    payload = {"domain": LONG, "served_by": "peer-1", "backends": [
        {"address": "10.0.0.2:8001", "healthy": True, "model": "z-ai/glm-5.3-flash", "last_seen": 12},
        {"address": "10.0.0.9:8001", "healthy": False},
    ]}
    backends = parse_backends_list(payload)
    assert [(b.address, b.healthy) for b in backends] == [("10.0.0.2:8001", True), ("10.0.0.9:8001", False)]
    assert backends[0].host == "10.0.0.2"


@pytest.mark.parametrize("payload", [[], {"domain": LONG}, {"backends": [{"address": "a:1"}]}, {"backends": [{"healthy": True}]}, {"backends": ["a:1"]}])
def test_backends_list_other_shapes_fail_naming_the_assumption(payload):
    with pytest.raises(MalformedResponse) as err:
        parse_backends_list(payload)
    assert "assumed shape" in str(err.value)


async def test_model_proxy_routes_and_presence():
    with respx.mock(base_url=PEER, assert_all_called=False) as r:
        def backends(request):
            domain = request.url.params["domain"]
            listed = [{"address": "10.0.0.2:8001", "healthy": True}] if domain == LONG else [{"address": "10.0.0.5:8001", "healthy": True}]
            return httpx.Response(200, json={"domain": domain, "backends": listed})

        r.get("/backends/list").mock(side_effect=backends)
        async with ModelProxyClient("peer-1", PEER, "mp-token-secret", retry=FAST) as mp:
            long_presence = await mp.presence("10.0.0.2:8001", LONG)
            base_presence = await mp.presence("10.0.0.2:8001", BASE_DOMAIN)
            by_host = await mp.presence("10.0.0.2", LONG)
            with pytest.raises(RequestInvalid):
                await mp.presence("10.0.0.2:8001", "")
        assert r.routes[0].calls.last.request.headers["authorization"] == "Bearer mp-token-secret"
    assert long_presence.listed and long_presence.healthy
    assert not base_presence.listed and not base_presence.healthy
    assert by_host.listed


async def test_model_proxy_without_token_sends_no_auth_and_bad_backends_list_is_malformed():
    with respx.mock(base_url=PEER) as r:
        route = r.get("/backends/list").mock(return_value=httpx.Response(200, json={"total_backends": 1}))
        async with ModelProxyClient("peer-2", PEER, retry=FAST) as mp:
            with pytest.raises(MalformedResponse) as err:
                await mp.presence("10.0.0.2:8001", LONG)
        assert "authorization" not in route.calls.last.request.headers
    assert err.value.system == "model-proxy:peer-2"

