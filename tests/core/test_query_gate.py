"""The `query:` gate: a PromQL instant or range query against the inventory's Prometheus-compatible
API, every value within numeric bounds; an empty answer is "no data", a failure.

Mutation list (each guard disabled in the source, the named test seen failing, the source restored):
- prometheus_api.judge_query's "no data" branch -> test_an_empty_answer_is_no_data_never_a_pass;
- judge_query's min comparison -> test_a_value_below_min_fails_naming_the_series;
- gate_specs.QuerySpec._promql's unknown-placeholder refusal -> test_a_misspelt_placeholder_is_refused;
- query.Query's `prometheus_url is None` check -> test_a_host_without_prometheus_url_fails_the_gate;
- apps/prometheus.evaluate's empty-matcher refusal -> test_the_simulator_refuses_a_selector_matching_everything.
"""

from __future__ import annotations

import asyncio
import copy
import json
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.engine.step_descriptions import describe_step
from orchestrator.engine.steps import handler_for
from orchestrator.language.gate_specs import QuerySpec, fill_query
from orchestrator.language.runbook import parse_runbook
from orchestrator.metricproviders.prometheus_api import (
    PrometheusUnreadable,
    QuerySeries,
    judge_query,
    parse_query_answer,
)
from orchestrator_sim.apps.prometheus import BadQuery, evaluate
from tests.core.test_gate_specs import CANARY

DISK = {"promql": 'min(node_filesystem_avail_bytes{host="{host}", mountpoint="/var/lib/docker"})',
        "min": 268435456000, "what": "free bytes on the model cache's filesystem"}


def _rb(query: dict, where: str = "forward") -> Any:
    raw = copy.deepcopy(CANARY)
    step = {"id": "cache-space", "say": "At least 250 GiB free on the model cache's filesystem", "query": query}
    if where == "preflight":
        raw["preflight"].append(step)
    else:
        raw["phases"][0]["steps"].insert(4, step)
    return parse_runbook(raw)


def _step(rb: Any) -> Any:
    return next(st for steps in rb.step_lists() for st in steps if st.id == "cache-space")


def test_promql_braces_are_sent_as_written_and_only_a_bare_name_is_a_placeholder():
    spec = QuerySpec.model_validate(DISK)
    assert fill_query(spec.promql, {"host": "gpu02"}) == \
        'min(node_filesystem_avail_bytes{host="gpu02", mountpoint="/var/lib/docker"})'
    assert fill_query('DCGM_FI_DEV_FB_FREE{gpu=~"4|5|6|7", job=~"dcgm.{2}"}', {"host": "x"}) == \
        'DCGM_FI_DEV_FB_FREE{gpu=~"4|5|6|7", job=~"dcgm.{2}"}'


def test_a_misspelt_placeholder_is_refused():
    with pytest.raises(ValidationError, match=r"unknown placeholder \{hots\}"):
        QuerySpec.model_validate({**DISK, "promql": 'node_filesystem_avail_bytes{host="{hots}"}'})


@pytest.mark.parametrize("over, message", [
    ({"min": None}, "needs min: or max:"),
    ({"min": "250GiB"}, "a query bound is a number"),
    ({"min": 2, "max": 1}, "min is above max"),
    ({"step": "1m"}, "step belongs to a range query"),
    ({"range": "1m", "step": "2m"}, "at most the range"),
])
def test_a_wrong_query_gate_is_refused(over: dict, message: str):
    with pytest.raises(ValidationError, match=message):
        QuerySpec.model_validate({**DISK, **over})


def test_plan_says_what_the_gate_fails_on():
    rb = _rb(DISK)
    gate = describe_step(_step(rb), rb).gate
    assert "GET /api/v1/query (instant)" in gate
    assert "free bytes on the model cache's filesystem >= 268_435_456_000" in gate
    assert "fails on a value outside that, on no data (an empty answer)" in gate
    rng = _rb({"promql": "max(DCGM_FI_DEV_XID_ERRORS)", "max": 0, "range": "30m"})
    assert "query_range over the last 30m every 30s" in describe_step(_step(rng), rng).gate
    assert "every point of every series has the value <= 0" in describe_step(_step(rng), rng).gate


def _answer(kind: str, result: Any, status: int = 200) -> tuple[int, str]:
    return status, json.dumps({"status": "success", "data": {"resultType": kind, "result": result}})


def test_answers_are_read_as_vectors_matrices_and_scalars():
    v = parse_query_answer(*_answer("vector", [{"metric": {"__name__": "up", "job": "node"}, "value": [1, "1"]}]))
    assert v == [QuerySeries({"__name__": "up", "job": "node"}, [1.0])] and v[0].name() == 'up{job="node"}'
    m = parse_query_answer(*_answer("matrix", [{"metric": {}, "values": [[1, "0"], [2, "3"]]}]))
    assert m[0].values == [0.0, 3.0]
    assert parse_query_answer(*_answer("scalar", [1, "42"]))[0].values == [42.0]
    with pytest.raises(PrometheusUnreadable, match="HTTP 400: parse error"):
        parse_query_answer(400, json.dumps({"status": "error", "error": "parse error"}))
    with pytest.raises(PrometheusUnreadable, match="not a vector, a matrix or a scalar"):
        parse_query_answer(*_answer("string", [1, "x"]))


def test_an_empty_answer_is_no_data_never_a_pass():
    assert judge_query([], 1.0, None) == ["no data: the query answered no series (an absent series is never a pass)"]
    assert judge_query([QuerySeries({}, [])], None, 0.0)[0].startswith("no data")


def test_a_value_below_min_fails_naming_the_series():
    s = [QuerySeries({"mountpoint": "/"}, [5.0]), QuerySeries({"mountpoint": "/data"}, [50.0])]
    assert judge_query(s, 10.0, None) == ['{mountpoint="/"} = 5.0, below 10.0']
    assert judge_query([QuerySeries({}, [0.0, 79.0, 0.0])], None, 0.0) == ["{} = 79.0, above 0.0"]
    assert judge_query([QuerySeries({}, [float("nan")])], 0.0, None) == ["{} is NaN (not a number)"]
    assert judge_query(s, 1.0, 100.0) == []


# -- the handler, over a fake runtime and a fake client ------------------------------------------------

class FakeClient:
    def __init__(self, answers: list[tuple[int, str]]) -> None:
        self.answers, self.calls, self.closed = answers, [], False

    async def query(self, promql: str) -> tuple[int, str]:
        self.calls.append(("query", promql))
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    async def query_range(self, promql: str, seconds: float, step: float) -> tuple[int, str]:
        self.calls.append(("query_range", promql, seconds, step))
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    async def aclose(self) -> None:
        self.closed = True


class Clock:
    now = 0.0

    def monotonic(self) -> float:
        return self.now


class FakeRt:
    def __init__(self, rb: Any, client: FakeClient, *, prometheus: str | None = "http://prom.test:9090") -> None:
        self.rb, self.client, self.clock, self.poll = rb, client, Clock(), 30.0
        self.run = SimpleNamespace(host="gpu02", tag="v0.0.304", run_id="run-1")
        self.entry = SimpleNamespace(prometheus_url=prometheus, github_repo=None)
        self.events: list[Any] = []

    def prometheus_client(self) -> FakeClient:
        return self.client

    def github_repo(self) -> None:
        return None

    def scrub(self, text: str) -> str:
        return text

    def emit(self, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))

    async def wait(self, seconds: float | None = None) -> None:
        self.clock.now += self.poll if seconds is None else seconds


def _run(query: dict, answers: list[tuple[int, str]], **rt_over: Any) -> tuple[Any, FakeClient]:
    rb = _rb(query)
    st = _step(rb)
    client = FakeClient(answers)
    rt = FakeRt(rb, client, **rt_over)
    return asyncio.run(handler_for(st)(rt, None, st)), client  # type: ignore[arg-type]


def _disk(value: str) -> tuple[int, str]:
    return _answer("vector", [{"metric": {}, "value": [1, value]}])


def test_the_gate_passes_on_enough_free_space_and_sends_the_promql_filled_in():
    out, client = _run(DISK, [_disk("412316860416")])
    assert out.event == "ok", out.note
    assert "holds: {} = 412_316_860_416" in out.note
    assert client.calls == [("query", 'min(node_filesystem_avail_bytes{host="gpu02", mountpoint="/var/lib/docker"})')]
    assert client.closed


def test_too_little_space_fails_naming_value_and_bound():
    out, _ = _run(DISK, [_disk("107374182400")])
    assert out.event == "fail"
    assert "{} = 107_374_182_400, below 268_435_456_000" in out.note


def test_no_data_fails_the_gate():
    out, _ = _run(DISK, [_answer("vector", [])])
    assert out.event == "fail" and "no data" in out.note


def test_an_unreadable_api_fails_and_within_polls_until_it_holds():
    out, _ = _run({**DISK, "within": "2m"}, [(503, json.dumps({"status": "error", "error": "down"})), _disk("412316860416")])
    assert out.event == "ok", out.note
    out, _ = _run(DISK, [(503, json.dumps({"status": "error", "error": "down"}))])
    assert out.event == "fail" and "HTTP 503: down" in out.note


def test_a_range_query_checks_every_point():
    xid = {"promql": 'max(DCGM_EXP_XID_ERRORS_COUNT{host="{host}"})', "max": 0, "range": "30m", "step": "1m"}
    out, client = _run(xid, [_answer("matrix", [{"metric": {}, "values": [[1, "0"], [2, "1"], [3, "0"]]}])])
    assert out.event == "fail" and "{} = 1, above 0" in out.note
    assert client.calls == [("query_range", 'max(DCGM_EXP_XID_ERRORS_COUNT{host="gpu02"})', 1800.0, 60.0)]


def test_a_host_without_prometheus_url_fails_the_gate():
    out, client = _run(DISK, [_disk("412316860416")], prometheus=None)
    assert out.event == "fail" and "names no prometheus_url for gpu02" in out.note and client.calls == []


# -- the simulator's query API -------------------------------------------------------------------------

SERIES = [({"__name__": "DCGM_FI_DEV_FB_FREE", "gpu": str(g), "host": "gpu02"}, 3789.0 + 205 * (g % 4)) for g in range(8)]


def test_the_simulator_evaluates_selectors_and_one_aggregation():
    assert len(evaluate('DCGM_FI_DEV_FB_FREE{gpu=~"4|5|6|7"}', SERIES)) == 4
    assert evaluate('min(DCGM_FI_DEV_FB_FREE{gpu=~"4|5|6|7"})', SERIES) == [({}, 3789.0)]
    assert evaluate('max by (gpu) (DCGM_FI_DEV_FB_FREE{gpu="7"})', SERIES) == [({"gpu": "7"}, 3789.0 + 615)]
    assert evaluate('count(DCGM_FI_DEV_FB_FREE) without (gpu)', SERIES) == [({"host": "gpu02"}, 8.0)]
    assert evaluate('DCGM_FI_DEV_FB_FREE{host="gpu03"}', SERIES) == []
    with pytest.raises(BadQuery, match="understands a selector"):
        evaluate("rate(DCGM_FI_DEV_FB_FREE[5m])", SERIES)


def test_the_simulator_refuses_a_selector_matching_everything():
    with pytest.raises(BadQuery, match="at least one non-empty matcher"):
        evaluate('{gpu=~".*"}', SERIES)
