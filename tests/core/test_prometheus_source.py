"""`source: prometheus` (issue 23): the analysis' series from a Prometheus-compatible query API the
inventory names. Load-time validation (one line, exit 2), plan's rendering, the inventory field,
the run-start refusal, and the provider against respx-mocked answers (errors never a pass)."""

from __future__ import annotations

import asyncio
import copy
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import respx
import yaml
from pydantic import ValidationError

from orchestrator.analysis.metric_defs import ABORTED, QUEUE, REQUESTS, TPOT
from orchestrator.analysis.spec import AnalysisSpec
from orchestrator.analysis.window import measure, window_of
from orchestrator.language.runbook import parse_runbook
from orchestrator.metricproviders.prometheus_api import PrometheusUnreadable, parse_vector, read_replica, replica_query
from tests.core.test_analysis_spec import GOOD, with_analysis

PROM = {**{k: v for k, v in GOOD.items() if k != "relay"}, "source": "prometheus",
        "prometheus": {"replica_label": "replica", "selector": 'job="sglang", instance=~"gpu02.*"'}}
API = "http://127.0.0.1:9090"


def _spec(**over) -> AnalysisSpec:
    return AnalysisSpec.model_validate({**PROM, **over})


# ------------------------------------------------------------------------------------ load time
def test_a_prometheus_analysis_loads_and_plan_names_its_source():
    rb = parse_runbook(with_analysis(PROM))
    st = next(s for s in rb.phases[0].steps if s.id == "canary-readout")
    assert st.analysis is not None and st.analysis.source == "prometheus" and st.analysis.relay is None
    text = st.analysis.describe()
    assert "from the inventory's Prometheus query API by replica=<replica>" in text and 'job="sglang"' in text
    assert "tpot_p50 r2/r1 <= 0.9" in text


def test_prometheus_block_defaults_when_source_prometheus():
    s = _spec(prometheus=None)
    assert s.prometheus is not None and s.prometheus.replica_label == "replica" and s.prometheus.selector == ""


@pytest.mark.parametrize("selector", ['job="sglang', "job=sglang", 'job=="x"', '{job="x"}', 'job="x" instance="y"',
                                      '__name__=~".*"', 'job="x"; drop'])
def test_a_malformed_selector_is_refused(selector: str):
    with pytest.raises(ValidationError, match="selector"):
        _spec(prometheus={"selector": selector})


def test_source_relay_needs_relay_and_prometheus_needs_neither_relay_nor_dcgm():
    no_relay = {k: v for k, v in GOOD.items() if k != "relay"}
    with pytest.raises(ValidationError, match="relay: \\{token_variable, ports\\}"):
        AnalysisSpec.model_validate(no_relay)
    with pytest.raises(ValidationError, match="only with source: prometheus"):
        AnalysisSpec.model_validate({**GOOD, "prometheus": {}})
    with pytest.raises(ValidationError, match="drop relay: and dcgm:"):
        _spec(relay=GOOD["relay"])
    with pytest.raises(ValidationError, match="does not map yet"):
        _spec(gates=[{"min": {"metric": "min_free_device_memory_gb", "replica": "r2", "value": 5}}])


def test_a_prometheus_gate_on_an_unknown_replica_is_refused_at_load():
    a = copy.deepcopy(PROM)
    a["gates"][0]["ratio"]["candidate"] = "r7"
    with pytest.raises(Exception, match="'r7' as its candidate, not a replica of the runbook"):
        parse_runbook(with_analysis(a))


def test_orchestrate_plan_refuses_a_malformed_selector_in_one_line_exit_2(tmp_path: Path):
    a = copy.deepcopy(PROM)
    a["prometheus"]["selector"] = 'job="sglang'
    path = tmp_path / "bad-prom.yaml"
    path.write_text(yaml.safe_dump(with_analysis(a)))
    exe = Path(sys.executable).parent / "orchestrate"
    res = subprocess.run([str(exe), "plan", "gpu02", "--tag", "v0.0.300", "--runbook", str(path),
                          "--inventory", str(Path(__file__).resolve().parents[2] / "config" / "hosts.yaml")],
                         capture_output=True, text=True, timeout=120)
    out = (res.stdout + res.stderr).strip()
    assert res.returncode == 2, out
    assert "prometheus.selector" in out and "Traceback" not in out and len(out.splitlines()) == 1


# --------------------------------------------------------------------------- inventory, run start
def _entry(**over):
    from orchestrator.hosts.inventory import HostEntry

    return HostEntry.model_validate({
        "compose_manager_url": "http://127.0.0.1:1", "instance_name": "gpu02", "model_proxy_address": "10.0.0.2:8080",
        "inference_endpoint": "http://127.0.0.1:2", "soak_relay_base_url": "http://127.0.0.1",
        "available_ram_gib": 100, "available_ram_source": "test", "gpus": 8, **over})


def test_the_inventory_names_a_prometheus_url_per_host():
    assert _entry().prometheus_url is None
    assert str(_entry(prometheus_url=API).prometheus_url).startswith(API)
    with pytest.raises(ValidationError):
        _entry(prometheus_url="not a url")


def test_a_prometheus_analysis_on_a_host_without_prometheus_url_is_refused_at_run_start():
    from orchestrator.service.refusals import refuse_missing_sources
    from orchestrator.util.user_errors import UserError

    rb = parse_runbook(with_analysis(PROM))
    with pytest.raises(UserError, match="names no prometheus_url for gpu02") as e:
        refuse_missing_sources(_entry(), "gpu02", rb, ["gpu02"])
    assert "\n" not in str(e.value) and "canary-readout" in str(e.value)
    refuse_missing_sources(_entry(prometheus_url=API), "gpu02", rb, ["gpu02"])  # named: no refusal
    refuse_missing_sources(_entry(), "gpu02", parse_runbook(with_analysis(GOOD)), ["gpu02"])  # relay source: no need


# ----------------------------------------------------------------------------------- the provider
def _sample(name: str, value: float, **labels: str) -> dict:
    return {"metric": {"__name__": name, "replica": "r2", "job": "sglang", **labels}, "value": [1.0e9, repr(value)]}


def _vector(n: float, aborted: float = 0.0, slow: float = 0.0) -> dict:
    buckets = [(0.02, n - slow), (0.05, n), ("+Inf", n)]
    result = [_sample(REQUESTS, n), _sample(ABORTED, aborted), _sample(QUEUE, 3, gpu="0"), _sample(QUEUE, 1, gpu="1")]
    for le, c in buckets:  # two label sets (two tp ranks' series): summed per le
        result += [_sample(TPOT + "_bucket", c / 2, le=str(le), tp_rank="0"),
                   _sample(TPOT + "_bucket", c / 2, le=str(le), tp_rank="1")]
    result += [_sample(TPOT + "_count", n), _sample(TPOT + "_sum", n * 0.02)]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def test_the_query_is_one_selector_of_every_series_by_replica_label():
    q = replica_query("r2", "replica", 'job="sglang"')
    assert q.startswith('{__name__=~"') and 'replica="r2"' in q and q.endswith(', job="sglang"}')
    assert "sglang:inter_token_latency_seconds_bucket" in q.replace("\\", "") and "num_requests_total" in q


def test_an_instant_vector_becomes_a_scrape_the_window_arithmetic_reads():
    a, b = parse_vector(_vector(100), 0.0), parse_vector(_vector(400, aborted=3, slow=300), 60.0)
    assert a.counters[REQUESTS] == 100 and a.gauges[QUEUE] == 4
    assert a.histograms[TPOT].buckets[-1] == (float("inf"), 100)
    w = window_of("r2", [a, b])
    assert measure("request_rate", w).value == pytest.approx(5.0)
    assert measure("error_rate", w).value == pytest.approx(0.01)
    tpot = measure("tpot_p50", w).value
    assert tpot is not None and 0.02 < tpot <= 0.05  # the window's 300 new requests sit in (0.02, 0.05]


def test_a_vector_without_the_series_is_an_absent_series_not_a_pass():
    empty = parse_vector({"status": "success", "data": {"resultType": "vector", "result": []}}, 0.0)
    m = measure("tpot_p50", window_of("r2", [empty, empty]))
    assert m.value is None and m.samples == 0


@pytest.mark.parametrize("answer", [
    {"status": "error", "errorType": "bad_data", "error": "parse error"},
    {"status": "success", "data": {"resultType": "matrix", "result": []}},
    {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [0, "1"]}]}},
    {"status": "success", "data": {"resultType": "vector", "result": [_sample(TPOT + "_bucket", 1, le="0.1")]}},
])
def test_an_error_or_malformed_answer_is_unreadable(answer):
    with pytest.raises(PrometheusUnreadable):
        parse_vector(answer, 0.0)


def _read(**kw):
    from orchestrator.hosts.clients.prometheus import PrometheusQueryClient

    async def go():
        c = PrometheusQueryClient(API + "/", **kw)
        try:
            return await read_replica(c, "r2", 5.0, replica_label="replica", selector='job="sglang"')
        finally:
            await c.aclose()
    return asyncio.run(go())


def test_read_replica_gets_api_v1_query_with_the_selector():
    with respx.mock(base_url=API) as r:
        route = r.get("/api/v1/query").mock(return_value=httpx.Response(200, json=_vector(10)))
        s = _read()
    assert s.at == 5.0 and s.counters[REQUESTS] == 10
    assert route.calls.last.request.url.params["query"] == replica_query("r2", "replica", 'job="sglang"')


@pytest.mark.parametrize("response, why", [
    (httpx.Response(503, json={"status": "error", "error": "down"}), "HTTP 503: down"),
    (httpx.Response(200, text="<html>proxy</html>"), "without JSON"),
    (httpx.Response(422, json={"status": "error", "errorType": "execution", "error": "too many samples"}), "422"),
])
def test_read_replica_errors_are_unreadable(response, why):
    with respx.mock(base_url=API) as r:
        r.get("/api/v1/query").mock(return_value=response)
        with pytest.raises(PrometheusUnreadable, match=why):
            _read()


def test_read_replica_timeout_and_refusal_are_unreachable():
    from orchestrator.hosts.clients.prometheus import PrometheusUnreachable

    with respx.mock(base_url=API) as r:
        r.get("/api/v1/query").mock(side_effect=httpx.ReadTimeout("slow"))
        with pytest.raises(PrometheusUnreachable, match="did not answer within 2 s"):
            _read(timeout=2.0)
    with respx.mock(base_url=API) as r:
        r.get("/api/v1/query").mock(side_effect=httpx.ConnectError("refused"))
        with pytest.raises(PrometheusUnreachable, match="could not be reached"):
            _read()



def test_the_query_client_of_a_step_goes_through_the_run_s_transport():
    """The run's transport is the seam every host read goes through (in tests: the simulated clock
    that stands still while an answer is awaited); the query API's client, made per step, too.
    Without it a canary reading Prometheus in tests/e2e/test_prometheus_canary_e2e.py kept 23 of
    its 30 polls on an idle machine and 10 under load (inconclusive); with it, 31 and 27."""
    from orchestrator.hosts.host_clients import HostClients

    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url.path))
        return httpx.Response(200, json=_vector(10))

    clients = HostClients(compose=None, dashboard=None, peers=[], inference=None, redactor=None,  # type: ignore[arg-type]  # only the query API is used
                          transport=httpx.MockTransport(answer))

    async def go():
        c = clients.prometheus(API)
        try:
            return await c.query("up")
        finally:
            await c.aclose()

    status, _ = asyncio.run(go())
    assert status == 200 and seen == ["/api/v1/query"]
