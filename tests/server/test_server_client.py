"""The `--server` client against canned answers (respx): following, exit codes, retries, no double submit."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import respx

from orchestrator.teamserver.remote import remote

URL = "https://orchestrate.test:8000"
RUN = "gpu02-20261130T0812-7f3a"
TOKEN = "client-token-0123456789abcdef"
BODY = {"host": "gpu02", "tag": "v0.0.300", "runbook": None, "yes": False, "soak": None}


class FakeClock:
    def __init__(self) -> None:
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return sum(self.slept)

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def t(seq: int, frm: str, ev: str, to: str, note: str | None = None) -> dict[str, Any]:
    return {"seq": seq, "from": frm, "event": ev, "to": to, "at": f"2026-11-30T08:{10 + seq:02d}:00+00:00", "note": note}


def run(transitions: list[dict[str, Any]], *, terminal: bool = False, outcome: str | None = None,
        worker: dict[str, Any] | None = None, lease: bool = True, message: str | None = None) -> dict[str, Any]:
    return {
        "run_id": RUN, "host": "gpu02", "kind": "rollout", "tag": "v0.0.300", "runbook": "rb",
        "state": transitions[-1]["to"] if transitions else "preflight.env-map", "outcome": outcome,
        "message": message, "created_at": "2026-11-30T08:12:00+00:00", "updated_at": "2026-11-30T08:12:00+00:00",
        "parent_run_id": None, "terminal": terminal, "transitions": transitions, "effects": [],
        "lease": {"owner": "srv:1", "token": 3, "expires_at": "2026-11-30T09:00:00+00:00"} if lease else None,
        "worker": worker,
    }


def worker(status: str = "running", events: list[dict[str, Any]] | None = None, error: str | None = None) -> dict[str, Any]:
    return {"status": status, "error": error, "outcome": None, "step": None, "waiting": None, "events": events or []}


def ev(seq: int, kind: str, **fields: Any) -> dict[str, Any]:
    return {"seq": seq, "event": kind, "at": 1795939200.0 + seq, **fields}


def lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in text.splitlines() if x.strip()]


def test_follow_prints_each_transition_once_in_order_and_exits_with_the_outcome(capsys):
    a = [t(1, "preflight.env-map", "ok", "preflight.budget")]
    b = a + [t(2, "preflight.budget", "ok", "r2.stop-old"), t(3, "r2.stop-old", "halt", "HALTED", "stuck")]
    with respx.mock(base_url=URL) as r:
        submit = r.post("/runs").respond(202, json={"run_id": RUN})
        r.get(f"/runs/{RUN}").mock(side_effect=[
            httpx.Response(200, json=run([], worker=worker(events=[ev(1, "waiting", gate="env map")]))),
            httpx.Response(200, json=run(a, worker=worker())),
            httpx.Response(200, json=run(a, worker=worker())),  # nothing new
            httpx.Response(200, json=run(b, terminal=True, outcome="HALTED", message="a human must act",
                                         worker=worker("finished"))),
        ])
        rc = remote(URL, TOKEN, "rollout", BODY, as_json=True, clock=FakeClock())
    assert rc == 4
    sent = json.loads(submit.calls[0].request.content)
    assert "@" in sent.pop("by")  # who submits: user@machine, journaled as the submitter
    assert sent == {"action": "rollout", **BODY}
    assert submit.calls[0].request.headers["authorization"] == f"Bearer {TOKEN}"
    events = lines(capsys.readouterr().out)
    assert [e["event"] for e in events] == ["submitted", "waiting", "transition", "transition", "transition", "summary"]
    assert [e["seq"] for e in events if e["event"] == "transition"] == [1, 2, 3]
    assert events[-1]["outcome"] == "HALTED" and events[-1]["run_id"] == RUN


def test_the_follower_asks_only_for_events_it_has_not_seen():
    with respx.mock(base_url=URL) as r:
        r.post("/runs").respond(202, json={"run_id": RUN})
        get = r.get(f"/runs/{RUN}").mock(side_effect=[
            httpx.Response(200, json=run([], worker=worker(events=[ev(1, "note", text="a"), ev(2, "note", text="b")]))),
            httpx.Response(200, json=run([t(1, "x", "ok", "DONE")], terminal=True, outcome="DONE", worker=worker("finished"))),
        ])
        assert remote(URL, TOKEN, "rollout", BODY, as_json=True, clock=FakeClock()) == 0
    assert [c.request.url.params["events_after"] for c in get.calls] == ["0", "2"]


@pytest.mark.parametrize("outcome,code", [("DONE", 0), ("ROLLED_BACK", 3), ("HALTED", 4), ("ABORTED", 5)])
def test_exit_code_of_each_outcome(outcome, code, capsys):
    with respx.mock(base_url=URL) as r:
        r.post("/runs").respond(202, json={"run_id": RUN})
        r.get(f"/runs/{RUN}").respond(200, json=run([t(1, "a", "ok", outcome)], terminal=True, outcome=outcome,
                                                    message=f"{outcome} because"))
        assert remote(URL, TOKEN, "rollout", BODY, as_json=False, clock=FakeClock()) == code
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"{outcome} {outcome} because"
    assert f"a ok -> {outcome}" in out


def test_a_finished_worker_over_a_run_not_yet_terminal_is_read_again(capsys):
    """The server's answer reads the journal, then the worker: a run that ended between the two
    shows a "finished" worker over a run not yet terminal (seen once in CI: ROLLED_BACK exited 1).
    The follower reads once more and exits with the outcome."""
    a = [t(1, "a", "ok", "b")]
    with respx.mock(base_url=URL) as r:
        r.post("/runs").respond(202, json={"run_id": RUN})
        r.get(f"/runs/{RUN}").mock(side_effect=[
            httpx.Response(200, json=run(a, worker=worker("finished"))),
            httpx.Response(200, json=run(a + [t(2, "b", "fail", "ROLLED_BACK")], terminal=True, outcome="ROLLED_BACK",
                                         worker=worker("finished"))),
        ])
        assert remote(URL, TOKEN, "rollout", BODY, as_json=False, clock=FakeClock()) == 3
    assert "ROLLED_BACK" in capsys.readouterr().out.splitlines()[-1]


def test_a_run_nobody_holds_stops_the_follower_with_resume_advice(capsys):
    with respx.mock(base_url=URL) as r:
        r.post("/runs").respond(202, json={"run_id": RUN})
        r.get(f"/runs/{RUN}").respond(200, json=run([t(1, "a", "ok", "b")], lease=False, worker=None))
        clock = FakeClock()
        assert remote(URL, TOKEN, "resume", {"run_id": RUN}, as_json=False, clock=clock) == 4
    assert f"orchestrate resume {RUN}" in capsys.readouterr().err
    assert clock.slept == [1.0]  # one more look before giving up


def test_a_run_another_server_holds_is_followed_through_the_journal():
    with respx.mock(base_url=URL) as r:
        r.post("/runs").respond(202, json={"run_id": RUN})
        r.get(f"/runs/{RUN}").mock(side_effect=[
            httpx.Response(200, json=run([t(1, "a", "ok", "b")], lease=True, worker=None)),
            httpx.Response(200, json=run([t(1, "a", "ok", "b")], lease=True, worker=None)),
            httpx.Response(200, json=run([t(1, "a", "ok", "b")], lease=True, worker=None)),
            httpx.Response(200, json=run([t(1, "a", "ok", "b"), t(2, "b", "ok", "DONE")], terminal=True, outcome="DONE")),
        ])
        assert remote(URL, TOKEN, "resume", {"run_id": RUN}, as_json=False, clock=FakeClock()) == 0


def test_a_run_that_failed_on_the_server_is_exit_1_with_the_servers_words(capsys):
    with respx.mock(base_url=URL) as r:
        r.post("/runs").respond(202, json={"run_id": RUN})
        r.get(f"/runs/{RUN}").respond(200, json=run([], worker=worker("failed", error=f"RuntimeError: x; `orchestrate resume {RUN}`")))
        assert remote(URL, TOKEN, "rollout", BODY, as_json=False, clock=FakeClock()) == 1
    assert "RuntimeError: x" in capsys.readouterr().err


@pytest.mark.parametrize("status,exit_code,code", [(400, 2, 2), (409, 5, 5), (401, 2, 2), (404, 2, 2)])
def test_refusals_print_the_servers_line_and_exit_with_its_code(status, exit_code, code, capsys):
    with respx.mock(base_url=URL) as r:
        r.post("/runs").respond(status, json={"error": "gpu02 is leased by run X", "exit_code": exit_code})
        assert remote(URL, TOKEN, "rollout", BODY, as_json=False, clock=FakeClock()) == code
    err = capsys.readouterr().err
    assert err.startswith("orchestrate: gpu02 is leased by run X")
    assert ("ORCHESTRATOR_SERVER_TOKEN" in err) == (status == 401)


def test_reads_are_retried_on_503_but_a_submission_is_never_sent_twice(capsys):
    with respx.mock(base_url=URL) as r:
        submit = r.post("/runs").mock(side_effect=httpx.ReadTimeout("slow"))
        assert remote(URL, TOKEN, "rollout", BODY, as_json=False, clock=FakeClock()) == 4  # a human must look
        assert submit.call_count == 1  # the server may have acted: not sent again
    err = capsys.readouterr().err
    assert "cannot reach" in err and "may have accepted the rollout" in err and "nothing was submitted" not in err
    with respx.mock(base_url=URL) as r:
        r.post("/runs").respond(202, json={"run_id": RUN})
        get = r.get(f"/runs/{RUN}").mock(side_effect=[
            httpx.Response(503, json={"error": "busy", "exit_code": 1}),
            httpx.Response(503, text="<html>proxy</html>"),
            httpx.Response(200, json=run([t(1, "a", "ok", "DONE")], terminal=True, outcome="DONE")),
        ])
        assert remote(URL, TOKEN, "rollout", BODY, as_json=False, clock=FakeClock()) == 0
        assert get.call_count == 3


def test_an_unreachable_server_is_exit_2_naming_the_option_after_a_few_attempts(capsys):
    with respx.mock(base_url=URL) as r:
        submit = r.post("/runs").mock(side_effect=httpx.ConnectError("refused"))
        clock = FakeClock()
        assert remote(URL, TOKEN, "rollout", BODY, as_json=False, clock=clock) == 2  # bad input, never 1 (bugs)
        assert submit.call_count == 4 and len(clock.slept) == 3  # never connected: safe to try again
    err = capsys.readouterr().err
    assert f"cannot reach {URL}" in err and "check --server" in err and "nothing was submitted" in err
    assert err.count("\n") == 1  # one line


def test_approve_and_abort(capsys):
    with respx.mock(base_url=URL) as r:
        ap = r.post(f"/runs/{RUN}/approve").respond(200, json={"run_id": RUN, "gate": "r2.soak", "approved_by": "x"})
        ab = r.post(f"/runs/{RUN}/abort").respond(200, json={"run_id": RUN, "abort_requested": True, "runner": "srv:1",
                                                              "message": "abort recorded"})
        assert remote(URL, TOKEN, "approve", {"run_id": RUN, "gate": "r2.soak"}, as_json=False) == 0
        assert remote(URL, TOKEN, "abort", {"run_id": RUN}, as_json=False) == 0
    assert json.loads(ap.calls[0].request.content)["gate"] == "r2.soak"
    assert "@" in json.loads(ab.calls[0].request.content)["by"]  # user@machine, for the journal
    assert capsys.readouterr().out == f"approved r2.soak of {RUN}\nabort recorded\n"


def test_with_json_approve_and_signals_print_the_answer_as_it_came(capsys):
    """With --json the answer is printed as the server sent it: no human line is built from it, so
    an answer without `gate` or `message` is no KeyError."""
    with respx.mock(base_url=URL) as r:
        r.post(f"/runs/{RUN}/approve").respond(200, json={"run_id": RUN})
        r.post(f"/runs/{RUN}/pause").respond(200, json={"run_id": RUN})
        assert remote(URL, TOKEN, "approve", {"run_id": RUN}, as_json=True) == 0
        assert remote(URL, TOKEN, "pause", {"run_id": RUN}, as_json=True) == 0
    assert lines(capsys.readouterr().out) == [{"run_id": RUN}, {"run_id": RUN}]


def test_bad_arguments_are_exit_2(capsys):
    assert remote(URL, TOKEN, "deploy", {}, as_json=False) == 2
    assert remote("orchestrate.test:8000", TOKEN, "rollout", BODY, as_json=False) == 2
    assert remote(URL, TOKEN, "approve", {}, as_json=False) == 2
    err = capsys.readouterr().err
    assert "unknown remote action 'deploy'" in err and "http://" in err and "needs a run id" in err


def test_server_text_is_not_read_as_rich_markup(capsys):
    with respx.mock(base_url=URL) as r:
        r.post("/runs").respond(202, json={"run_id": RUN})
        r.get(f"/runs/{RUN}").respond(200, json=run([t(1, "a", "fail", "ROLLED_BACK", "[bold]x[/bold] [/red]")],
                                                    terminal=True, outcome="ROLLED_BACK"))
        assert remote(URL, TOKEN, "rollout", BODY, as_json=False, clock=FakeClock()) == 3
    assert "[bold]x[/bold] [/red]" in capsys.readouterr().out


def test_pause_and_continue(capsys):
    with respx.mock(base_url=URL) as r:
        p = r.post(f"/runs/{RUN}/pause").respond(200, json={"run_id": RUN, "paused_by": "x", "message": "pause recorded"})
        c = r.post(f"/runs/{RUN}/continue").respond(200, json={"run_id": RUN, "continued_by": "x",
                                                              "message": "continue recorded"})
        assert remote(URL, TOKEN, "pause", {"run_id": RUN}, as_json=False) == 0
        assert remote(URL, TOKEN, "continue", {"run_id": RUN}, as_json=False) == 0
    assert "@" in json.loads(p.calls[0].request.content)["by"] and "@" in json.loads(c.calls[0].request.content)["by"]
    assert capsys.readouterr().out == "pause recorded\ncontinue recorded\n"


def test_losing_the_server_while_following_says_the_run_goes_on_there_and_exits_4(capsys):
    with respx.mock(base_url=URL) as r:
        r.post("/runs").respond(202, json={"run_id": RUN})
        r.get(f"/runs/{RUN}").mock(side_effect=httpx.ConnectError("refused"))
        assert remote(URL, TOKEN, "rollout", BODY, as_json=False, clock=FakeClock()) == 4
    err = capsys.readouterr().err
    assert f"run {RUN} was submitted" in err and f"`orchestrate status {RUN} --server" in err
