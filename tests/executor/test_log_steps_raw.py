"""The `markers:`, `oneshot:` and `capture:` handlers judge an engine's log raw and show it scrubbed
over whole windows (a secret split across two lines is hidden whole), through the operations of
`Activities` alone (`raw_log`, `scrub`, `scrub_lines`): a stand-in runtime with a real redactor.

Mutations (each seen failing, then restored):
- markers.py, `lines` given to `judge_markers` instead of `rt.scrub_lines(lines)` -> the split token's head is quoted;
- markers.py, `alone = True` (a match quoted whatever its line) -> a split token's tail is quoted (both cases);
- oneshot.py, `judge_output(..., lines)` instead of `shown` -> the last line's head of a split token is quoted;
- oneshot.py, `rt.log.info("oneshot_output", lines=shown)` with the raw lines -> the token reaches the run log;
- capture.py, `rt.scrub_lines(...)` -> one line at a time -> the split token's halves reach the run log.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from structlog.testing import capture_logs

from orchestrator.engine.steps.capture import capture
from orchestrator.engine.steps.markers import markers
from orchestrator.engine.steps.oneshot import oneshot_completion
from orchestrator.hosts.parsers.docker_ps import Container
from orchestrator.hosts.redaction import Redactor
from orchestrator.language.step_specs import CaptureSpec, LogValue, MarkersSpec, OneShotSpec
from orchestrator.language.steps import Step

SVC = "model-r2"
TOKEN = "hf_Q8vR2mK7pX4nT9wLzY3c"
HEAD, TAIL = TOKEN[:11], TOKEN[11:]


class Stand:
    """The operations these handlers call, over a fixed log and a real redactor."""

    def __init__(self, log: list[str], *secrets: str, markers: dict[str, str | None] | None = None,
                 ps: list[Container] | None = None) -> None:
        self.red = Redactor(*secrets)
        self.text = "".join(f"{SVC}  | {ln}\n" for ln in log)
        self.rb = SimpleNamespace(log_markers=markers or {})
        self.run = SimpleNamespace(run_id="run-x")
        self.clock = SimpleNamespace(monotonic=lambda: 0.0)
        self.log = _Log()
        self.events: list[tuple[str, dict[str, Any]]] = []
        self._ps = ps or []

    async def raw_log(self, service: str, tail: int) -> str:
        return self.text

    def scrub(self, text: str) -> str:
        return self.red.scrub(text)

    def scrub_lines(self, lines: list[str]) -> list[str]:
        return self.red.scrub_lines(list(lines))

    def emit(self, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))

    async def ps(self) -> list[Container]:
        return self._ps

    async def wait(self, *a: Any, **kw: Any) -> None:
        raise AssertionError("not expected to wait")


class _Log:
    """The run log as structlog's capture sees it."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def info(self, event: str, **kw: Any) -> None:
        self.events.append({"event": event, **kw})

    warning = info


def step(**spec: Any) -> Step:
    return Step(id="gate", say="a gate", **spec)


async def test_a_marker_equal_to_a_declared_secret_is_judged_raw():
    # the required marker's text is a declared secret's value: on scrubbed text it would be missing
    rt = Stand(["loading", f"ready {TOKEN} serving"], TOKEN, markers={"ready": TOKEN})
    out = await markers(rt, None, step(markers=MarkersSpec(service=SVC, require=["ready"])))  # type: ignore[arg-type]
    assert out.event.value == "ok", out.note


async def test_a_forbidden_markers_line_is_quoted_with_a_split_secret_hidden_whole():
    rt = Stand(["boot", f"NCCL error: peer said {HEAD}", f"{TAIL} and more"], TOKEN, markers={"nccl": "NCCL error"})
    out = await markers(rt, None, step(markers=MarkersSpec(service=SVC, forbid=["nccl"])))  # type: ignore[arg-type]
    assert out.event.value == "fail" and "NCCL error: peer said ***" in out.note, out.note
    assert HEAD not in out.note and TAIL not in out.note


@pytest.mark.parametrize("pattern", [r"\w+=(\d+)", r"(\w+)=7"])  # a value out of bounds; a non-number
async def test_a_values_match_on_a_line_holding_a_secret_quotes_the_scrubbed_line(pattern):
    # the value's line begins with the tail of a token split across it and the line before
    rt = Stand([f"auth {HEAD}", f"{TAIL}=7 budget=9"], TOKEN)
    spec = MarkersSpec(service=SVC, values=[LogValue(pattern=pattern, max=5)])
    out = await markers(rt, None, step(markers=spec))  # type: ignore[arg-type]
    assert out.event.value == "fail" and "on a line (***=7 budget=9)" in out.note, out.note
    assert TAIL not in out.note and HEAD not in out.note, out.note


def _exited(code: int) -> list[Container]:
    return [Container(id="c1", name="check", image="img", state="exited", status=f"Exited ({code}) 1 second ago",
                      created_at="t", service=SVC)]


async def test_a_oneshots_failure_quotes_its_last_line_with_a_split_secret_hidden_whole():
    rt = Stand(["starting", f"using token {HEAD}", f"{TAIL} rejected"], TOKEN, ps=_exited(0))
    out = await oneshot_completion(rt, None, step(oneshot=OneShotSpec(service=SVC, timeout=60, last_line="done")))  # type: ignore[arg-type]
    assert out.event.value == "fail", out.note
    assert TAIL not in out.note and "*** rejected" in out.note, out.note
    [output] = [e for e in rt.log.events if e["event"] == "oneshot_output"]
    assert output["lines"] == ["starting", "using token ***", "*** rejected"]
    assert [f["line"] for k, f in rt.events if k == "log_line"] == ["*** rejected"]


async def test_a_oneshots_verdict_equal_to_a_declared_secret_is_judged_raw():
    rt = Stand(['{"event": "qualification_finished", "ok": true}'], "qualification_finished", ps=_exited(0))
    spec = OneShotSpec(service=SVC, timeout=60, ok_event="qualification_finished")
    out = await oneshot_completion(rt, None, step(oneshot=spec))  # type: ignore[arg-type]
    assert out.event.value == "ok", out.note


async def test_a_capture_keeps_a_split_secret_out_of_the_run_log():
    rt = Stand(["a", f"token {HEAD}", f"{TAIL} b"], TOKEN)
    with capture_logs():
        out = await capture(rt, None, step(capture=CaptureSpec(services=[SVC], tail=10)))  # type: ignore[arg-type]
    assert out.event.value == "ok", out.note
    [kept] = [e for e in rt.log.events if e["event"] == "log_capture"]
    text = repr(kept)
    assert HEAD not in text and TAIL not in text and "***" in text, text
