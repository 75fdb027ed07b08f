"""Issue 23: `watch:` on a step and DCGM's device memory -- load-time validation (one line, exit 2),
the DCGM text split per replica, gauges over a window, and a watch's breach rule."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.analysis.metric_defs import ABORTED, FB_FREE, QUEUE, REQUESTS
from orchestrator.analysis.verdict import FAIL, INCONCLUSIVE, PASS, judge_gate
from orchestrator.analysis.watch_spec import WatchSpec
from orchestrator.analysis.window import Scrape, window_of
from orchestrator.engine.executor.watch import breach
from orchestrator.language.runbook import RUNBOOK_DIR, parse_runbook
from orchestrator.metricproviders.dcgm import parse_dcgm
from orchestrator.util.user_errors import UserError

RAW = yaml.safe_load((RUNBOOK_DIR / "gpu02-glm53-w4afp8-qsplit-canary.yaml").read_text())


def _steps(raw: dict) -> list[dict]:
    return raw["phases"][0]["steps"]


def _step(raw: dict, sid: str) -> dict:
    return next(s for s in _steps(raw) if s["id"] == sid)


def _bad(mutate) -> str:
    raw = copy.deepcopy(RAW)
    mutate(raw)
    with pytest.raises(UserError) as ei:
        parse_runbook(raw, source="rb")
    msg = str(ei.value)
    assert "\n" not in msg
    return msg


def test_the_shipped_302_canary_loads_with_its_watch_and_dcgm_gates():
    rb = parse_runbook(copy.deepcopy(RAW))
    cold = next(s for s in rb.phases[0].steps if s.id == "cold-start")
    assert cold.watch is not None and cold.watch.replica == "r1" and cold.watch.max == {"error_rate": 0.02, "queue_depth_max": 8}
    [readout] = [s for s in rb.phases[0].steps if s.analysis is not None]
    texts = [g.text() for g in readout.analysis.gates]  # type: ignore[union-attr]
    assert texts == ["ttft_p50 r2/r1 <= 0.85", "tpot_p50 r2/r1 <= 0.9", "ttft_p99 r2/r1 <= 1",
                     "min_free_device_memory_gb of r2 >= 6", "min_free_device_memory_gb r2/r1 >= 1.5",
                     "completion_rate of r2 >= 0.99", "completion_rate r2/r1 >= 0.99"]
    # the change itself is checked on the running r2 before the readout: its startup line and its image
    ids = [s.id for s in rb.phases[0].steps]
    assert ids.index("cold-start") < ids.index("change-args") < ids.index("change-image") < ids.index("readout")
    args = next(s for s in rb.phases[0].steps if s.id == "change-args").markers
    assert args is not None and [(v.pattern, v.equals) for v in args.values] == [
        (r"server_args=ServerArgs\(.*\bchunked_prefill_size=(\d+)", 16384)]
    image = next(s for s in rb.phases[0].steps if s.id == "change-image").image
    assert image is not None and image.replica == "r2" and rb.replica_values["r2"]["engine_image"] == "8ff1a487b98a"
    r1 = rb.replicas["r1"][0]
    for steps in rb.step_lists():
        for st in steps:
            if st.mutating:
                assert r1 not in st.compose.services, st.id  # type: ignore[union-attr]


def test_a_watch_with_a_wrong_metric_name_is_refused():
    msg = _bad(lambda r: _step(r, "cold-start")["watch"]["max"].update(error_ratio=0.1))
    assert "unknown metric 'error_ratio'" in msg


def test_a_watch_window_shorter_than_its_poll_is_refused():
    msg = _bad(lambda r: _step(r, "cold-start")["watch"].update(window="10s"))
    assert "watch.window (10s) is shorter than watch.poll (30s)" in msg


def test_a_watch_on_a_compose_call_or_an_unknown_replica_is_refused():
    def on_up(r):
        _step(r, "apply")["watch"] = copy.deepcopy(_step(r, "cold-start")["watch"])
    assert "cannot sit on a up step" in _bad(on_up)
    assert "watch.replica 'r3' is not a replica" in _bad(lambda r: _step(r, "cold-start")["watch"].update(replica="r3"))
    assert "a watch needs max: or min:" in _bad(lambda r: _step(r, "cold-start")["watch"].update(max={}))
    msg = _bad(lambda r: _step(r, "cold-start")["watch"]["max"].update(min_free_device_memory_gb=1))
    assert "not on the replica's own /metrics" in msg


def test_a_device_memory_gate_without_a_dcgm_route_or_gpus_is_refused():
    msg = _bad(lambda r: _step(r, "readout")["analysis"].pop("dcgm"))
    assert "reads min_free_device_memory_gb from DCGM's exporter: the analysis needs dcgm:" in msg
    msg = _bad(lambda r: r["replica_gpus"].pop("r2"))
    assert "replica_gpus does not list r2's GPUs" in msg
    msg = _bad(lambda r: _step(r, "readout")["analysis"]["dcgm"].update(port=8009))
    assert "dcgm.port 8009 is also a replica's relay port" in msg


def test_orchestrate_plan_refuses_a_bad_watch_in_one_line_exit_2_and_renders_a_good_one(tmp_path: Path):
    raw = copy.deepcopy(RAW)
    _step(raw, "cold-start")["watch"]["max"]["queue_depth"] = 8
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    exe = Path(sys.executable).parent / "orchestrate"
    inv = str(Path(__file__).resolve().parents[2] / "config" / "hosts.yaml")
    res = subprocess.run([str(exe), "plan", "gpu02", "--tag", "v0.0.305", "--runbook", str(path), "--inventory", inv],
                         capture_output=True, text=True, timeout=120)
    out = (res.stdout + res.stderr).strip()
    assert res.returncode == 2 and len(out.splitlines()) == 1 and "unknown metric 'queue_depth'" in out, out
    res = subprocess.run([str(exe), "plan", "gpu02", "--tag", "v0.0.305", "--runbook", "gpu02-glm53-w4afp8-qsplit-canary",
                          "--inventory", inv], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "while it runs, r1 is watched through relay :8008 every 30s over a sliding 5m" in res.stdout
    assert "error_rate <= 0.02, queue_depth_max <= 8" in res.stdout
    assert "min_free_device_memory_gb of r2 >= 6; min_free_device_memory_gb r2/r1 >= 1.5" in res.stdout


DCGM = "\n".join(["# TYPE DCGM_FI_DEV_FB_FREE gauge"] + [
    f'DCGM_FI_DEV_FB_FREE{{gpu="{i}",UUID="GPU-{i}",modelName="NVIDIA H200"}} {v}'
    for i, v in enumerate([3789, 3994, 4198, 4403, 9523, 9728, 9933, 10137])]) + "\n"


def test_dcgm_text_is_split_per_replica_taking_the_tightest_gpu():
    per = parse_dcgm(DCGM, 5.0, {"r1": [0, 1, 2, 3], "r2": [4, 5, 6, 7], "r3": [8]})
    assert per["r1"].gauges == {FB_FREE: 3789.0} and per["r2"].gauges == {FB_FREE: 9523.0}
    assert "r3" not in per  # no GPU of r3 listed: its gate says the series is absent


def test_device_memory_gates_take_the_lowest_of_the_window_and_need_two_scrapes():
    r1 = [Scrape(t, gauges={FB_FREE: 3789.0}) for t in (0, 60, 120)]
    r2 = [Scrape(0, gauges={FB_FREE: 9523.0}), Scrape(60, gauges={FB_FREE: 1536.0}), Scrape(120, gauges={FB_FREE: 9523.0})]
    w = {"r1": window_of("r1", r1), "r2": window_of("r2", r2)}
    g = judge_gate("min_free_device_memory_gb", ("r2",), 6.0, None, w, 200)
    assert g.verdict == FAIL and "1.5 GB" in g.why  # one squeezed scrape is the minimum
    w["r2"] = window_of("r2", [r2[0], r2[2]])
    assert judge_gate("min_free_device_memory_gb", ("r2",), 6.0, None, w, 200).verdict == PASS  # not min_samples: scrapes
    assert judge_gate("min_free_device_memory_gb", ("r2", "r1"), 1.5, None, w, 200).verdict == PASS
    w["r2"] = window_of("r2", r2[:1])
    g = judge_gate("min_free_device_memory_gb", ("r2",), 6.0, None, w, 200)
    assert g.verdict == INCONCLUSIVE and "read 1 times in the window, the gate needs 2" in g.why


def _watch(**kw) -> WatchSpec:
    base = {"replica": "r1", "relay": {"token_variable": "T", "port": 8008}, "poll": "30s", "window": "5m",
            "min_samples": 20, "max": {"error_rate": 0.02, "queue_depth_max": 8}}
    return WatchSpec(**{**base, **kw})


def _s(t: float, req: float, ab: float, queue: float = 0.0) -> Scrape:
    return Scrape(t, counters={REQUESTS: req, ABORTED: ab}, gauges={QUEUE: queue})


def test_a_watch_breaches_on_enough_traffic_only_and_on_a_queue_at_once():
    w = _watch()
    assert breach(w, [_s(0, 100, 0), _s(30, 110, 5)]) is None  # 10 requests: too few to judge a rate
    found = breach(w, [_s(0, 100, 0), _s(30, 140, 8)])
    assert found and found.startswith("r1 error_rate = 20.00 % over the last 30 s (40 samples), not <= 0.02")
    assert breach(w, [_s(0, 100, 0), _s(30, 140, 0)]) is None
    found = breach(w, [_s(0, 100, 0), _s(30, 101, 0, queue=9)])  # a gauge needs no traffic
    assert found and "queue_depth_max = 9 over the last 30 s" in found


def test_the_302_canary_plan_is_byte_identical_to_its_golden():
    """Every gate with its thresholds and the watch, byte for byte. Regenerate after an intended
    change with ORCHESTRATOR_UPDATE_GOLDEN=1 and review the diff."""
    import os

    from orchestrator.language.machine import compile_rollout
    from orchestrator.previews.plan import build_plan, render_text

    rb = parse_runbook(copy.deepcopy(RAW))
    out = render_text(build_plan(rb, compile_rollout(rb), host="gpu02", tag="v0.0.305"))
    out = out if out.endswith("\n") else out + "\n"
    path = Path(__file__).resolve().parent / "golden" / "plan-gpu02-qsplit-canary.text.txt"
    if os.environ.get("ORCHESTRATOR_UPDATE_GOLDEN") == "1":
        path.write_text(out)
    assert out == path.read_text(), "the #302 canary's plan changed: review it, then regenerate"
