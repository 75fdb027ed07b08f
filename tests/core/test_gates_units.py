"""The new gates' pure parts and the loader rules for their fields."""

from __future__ import annotations

import copy
import json

import httpx
import pytest
import respx
import yaml

from orchestrator.engine.steps.labels import log_tags
from orchestrator.engine.steps.metrics import gauge_problem
from orchestrator.engine.steps.oneshot import exit_code, judge_output
from orchestrator.hosts.clients.errors import ServerError
from orchestrator.hosts.clients.inference import SoakRelayClient
from orchestrator.language.runbook import RUNBOOK_DIR, GaugeBound, parse_runbook
from orchestrator.metricproviders.metrics_text import MetricsTextError, samples, total
from orchestrator.util.user_errors import UserError

RAW = yaml.safe_load((RUNBOOK_DIR / "gpu02-glm53-w4afp8-long-context.yaml").read_text())
TEXT = """# HELP sglang:hicache_host_hit_tokens_total Prompt tokens restored.
# TYPE sglang:hicache_host_hit_tokens_total counter
sglang:hicache_host_hit_tokens_total{model_name="m",engine_image="fde25985aea3"} 120
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 3
sglang:num_running_reqs{model_name="n"} 0
"""


def test_metrics_text_is_read_by_sample_and_family_name():
    assert samples(TEXT, "sglang:hicache_host_hit_tokens_total")[0].labels["engine_image"] == "fde25985aea3"
    assert total(TEXT, "sglang:hicache_host_hit_tokens") == 120.0
    assert total(TEXT, "sglang:num_running_reqs") == 3.0
    assert total(TEXT, "sglang:absent") is None
    with pytest.raises(MetricsTextError, match="does not parse"):
        samples("sglang:x{model_name=\"unterminated 1\n", "sglang:x")


def test_gauge_bounds_check_every_label_set():
    assert gauge_problem(TEXT, GaugeBound(name="sglang:num_running_reqs", max=3)) is None
    assert "= 3, outside sglang:num_running_reqs <= 0" in gauge_problem(TEXT, GaugeBound(name="sglang:num_running_reqs", max=0))
    assert "is not exposed" in gauge_problem(TEXT, GaugeBound(name="sglang:nope", min=0))
    with pytest.raises(ValueError, match="needs min or max"):
        GaugeBound(name="x")


def test_one_shot_output_is_judged_by_its_exit_and_its_event():
    ok = ['{"event": "disk", "free_bytes": 1}', '{"event": "qualification_finished", "ok": true}']
    bad = ['{"event": "qualification_finished", "ok": false}']
    assert judge_output(ok, None, "qualification_finished", ok) is None
    assert judge_output(bad, None, "qualification_finished", bad) == "qualification_finished: ok=false"
    disk = ['{"event": "disk"}']
    assert "no 'qualification_finished' event" in judge_output(disk, None, "qualification_finished", disk)
    done, broken = ["a", "Download complete.", ""], ["Download complete.", "Traceback"]
    assert judge_output(done, "Download complete.", None, done) is None
    assert "last line" in judge_output(broken, "Download complete.", None, broken)
    assert exit_code("Exited (0) 3 seconds ago") == 0 and exit_code("Exited (137) 1 minute ago") == 137
    assert exit_code("Up 5 minutes") is None


def test_log_tags_come_from_the_datadog_label():
    label = json.dumps([{"source": "sglang", "tags": ["precision:int4", "config_variant:a-b:c", "env:prod"]}])
    assert log_tags({"com.datadoghq.ad.logs": label}) == {"precision": ["int4"], "config_variant": ["a-b:c"], "env": ["prod"]}
    assert log_tags({"com.datadoghq.ad.logs": "not json"}) == {}


async def test_relay_client_reads_metrics_text_and_raises_on_errors():
    with respx.mock(base_url="http://10.0.0.2:8009") as r:
        route = r.get("/metrics").mock(return_value=httpx.Response(200, text=TEXT))
        async with SoakRelayClient("http://10.0.0.2:8009", "tok-1234567890") as client:
            assert await client.metrics_text() == TEXT
            assert route.calls.last.request.headers["authorization"] == "Bearer tok-1234567890"
            route.mock(return_value=httpx.Response(500, text="boom"))
            with pytest.raises(ServerError):
                await client.metrics_text()


def _step(data, phase, sid):
    return next(s for s in data["phases"][phase]["steps"] if s["id"] == sid)


def _mutated(fn):
    data = copy.deepcopy(RAW)
    fn(data)
    return data


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda d: _step(d, 0, "host-restore")["metrics"].update(increase=[], gauges=[]), "it would check nothing"),
        (lambda d: _step(d, 0, "host-restore")["metrics"].update(evict=0), "evict"),
        (lambda d: _step(d, 0, "telemetry-labels")["labels"].update(replica="r9"), "labels.replica 'r9' has no replica_values entry"),
        (lambda d: _step(d, 0, "telemetry-labels")["labels"].update(log_tags=["colour"]), "replica_values.r2 has no 'colour'"),
        (lambda d: _step(d, 0, "telemetry-labels")["labels"].update(metric_labels=["precision"]), "metric_labels: needs relay:"),
        (lambda d: _step(d, 0, "perception-check")["oneshot"].update(service="hf-cleanup"), "which no earlier up in this list starts"),
        (lambda d: _step(d, 0, "perception-check").update(verify={"peers": True}), "must do exactly one of"),
    ],
)
def test_loader_refuses_bad_gate_fields_naming_them(mutate, needle):
    with pytest.raises(UserError) as exc:
        parse_runbook(_mutated(mutate), source="t.yaml")
    assert needle in str(exc.value) and "\n" not in str(exc.value)

