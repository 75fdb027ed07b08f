"""The one serving model (orchestrator/engine/rules/serving_evidence.py), pure: three-valued, and "unknown"
never permits a stop.

Mutation list (each guard deleted in the source, the tests run and seen failing, the source
restored):
- from_docker: `c.state != "running" or c.restarting` -> `c.state != "running"`: the restarting
  case fails; the `unhealthy` / `starting` / `healthy` branches removed: their cases fail.
- from_log: `if last_start > last_ready` removed -> the cold-start and restart cases fail;
  `return None` for a window without either line replaced by `not_serving(...)` (the behaviour
  of 77b15ae) -> test_a_rotated_window_decides_nothing fails (and the e2e case 11 tests);
  the `ran_here` branch removed -> test_an_engine_this_run_saw_ready_serves_without_its_lines fails.
- judge: the peers' `routed` checks removed -> test_without_the_peers_a_rotated_engine_is_unknown
  fails; the "no other engine serves" attribution removed -> test_the_peers_health_is_this_engines_
  when_no_other_engine_serves fails; the `up >= cold_start_s` condition removed ->
  test_a_short_up_time_with_another_engine_serving_is_unknown fails; `log.lines is not None`
  removed -> test_an_unreadable_log_with_another_engine_serving_is_unknown fails.
- stop_refusal: `if mine.not_serving: return None` removed -> test_stopping_an_engine_known_not_
  to_serve_is_allowed fails; `any(v.serving ...)` -> `any(not v.not_serving ...)` ->
  test_an_unknown_other_replica_never_permits_a_stop fails; the whole rule -> the property fails.
- Verdict.phrase: "NOT serving" for unknown -> test_unknown_is_said_unknown fails.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.engine.rules.serving_evidence import (
    LogWindow,
    Peers,
    State,
    Verdict,
    base_verdict,
    docker_health,
    from_docker,
    from_log,
    judge,
    not_serving,
    serving,
    stop_refusal,
    unknown,
    up_seconds,
)
from orchestrator.hosts.parsers.docker_ps import Container

READY = "The server is fired up and ready to roll!"
STARTUP = "server_args=ServerArgs("
MARKS = [READY]
START = f"[2026-11-01 10:00:00] {STARTUP}model_path='x')"
RANKS = [f"[2026-11-01 10:00:0{i} TP{i}] Load weight begin." for i in range(4)]
NOISE = ['[2026-11-30 10:00:00] INFO:     127.0.0.1:53826 - "GET /health HTTP/1.1" 200 OK'] * 500
COLD = 3000.0
ROUTED = Peers(True, "both peers route to 10.0.0.2")


def ctr(status: str = "Up 9 days", state: str = "running", health: str = "") -> Container:
    return Container(id="abc", name="e", image="img", state=state, status=status, created_at="t", service="e", health=health)


def window(*lines: str) -> LogWindow:
    return LogWindow(list(lines))


def judged(c=None, log=None, *, ran_here=False, peers=ROUTED, others=None, cold=COLD, relay=None) -> Verdict:
    return judge("e", ctr() if c is None else c, window(*NOISE) if log is None else log, ready_marks=MARKS, startup=STARTUP,
                 ran_here=ran_here, peers=peers, others={} if others is None else others, cold_start_s=cold, relay=relay)


# -- docker -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("c,state", [
    (None, State.NOT_SERVING),
    (ctr(state="restarting", status="Restarting (1) 3 seconds ago"), State.NOT_SERVING),
    (ctr(status="Restarting (137) 3 seconds ago"), State.NOT_SERVING),
    (ctr(state="exited", status="Exited (1) 2 minutes ago"), State.NOT_SERVING),
    (ctr(status="Up 9 days (unhealthy)"), State.NOT_SERVING),
    (ctr(status="Up 20 seconds (health: starting)"), State.NOT_SERVING),
    (ctr(status="Up 9 days (healthy)"), State.SERVING),
    (ctr(status="Up 9 days", health="healthy"), State.SERVING),
], ids=["absent", "restarting", "Restarting status", "exited", "unhealthy", "health starting", "healthy", "health field"])
def test_docker_decides_what_it_can(c, state):
    assert from_docker("e", c).state is state


def test_a_plain_running_container_is_not_decided_by_docker():
    assert from_docker("e", ctr()) is None
    assert docker_health(ctr()) == ""


def test_up_seconds_reads_dockers_status():
    assert up_seconds("Up 9 days") == 9 * 86400
    assert up_seconds("Up 4 weeks (healthy)") == 4 * 604800
    assert up_seconds("Up Less than a second") == 0.0
    assert up_seconds("Exited (1) 2 minutes ago") is None


# -- the log window ---------------------------------------------------------------------------------

def test_a_startup_line_with_no_ready_line_after_it_is_a_cold_start():
    v = from_log("e", window(*NOISE[:5], START, *RANKS), ready_marks=MARKS, startup=STARTUP, ran_here=False)
    assert v.not_serving and "cold start" in v.why


def test_a_startup_after_the_ready_line_is_a_restart():
    v = from_log("e", window(START, READY, *NOISE[:3], START), ready_marks=MARKS, startup=STARTUP, ran_here=True)
    assert v.not_serving and "started again" in v.why


def test_a_ready_line_after_the_last_start_serves():
    assert from_log("e", window(START, READY, START, *RANKS, READY), ready_marks=MARKS, startup=STARTUP, ran_here=False).serving


def test_a_rotated_window_decides_nothing():
    """Case 11: neither the start nor the ready line is in the window (docker's log rotation):
    that is no evidence of a cold start."""
    assert from_log("e", window(*NOISE), ready_marks=MARKS, startup=STARTUP, ran_here=False) is None
    assert from_log("e", window(), ready_marks=MARKS, startup=STARTUP, ran_here=False) is None


def test_an_engine_this_run_saw_ready_serves_without_its_lines():
    v = from_log("e", window(*NOISE), ready_marks=MARKS, startup=STARTUP, ran_here=True)
    assert v.serving and "in this run" in v.why


def test_an_unreadable_log_decides_nothing():
    assert from_log("e", LogWindow.unreadable("HTTP 500"), ready_marks=MARKS, startup=STARTUP, ran_here=True) is None


# -- live evidence ------------------------------------------------------------------------------------

def test_without_the_peers_a_rotated_engine_is_unknown():
    assert judged(peers=None).unknown
    assert judged(peers=Peers(None, "peer-b could not be asked")).unknown
    v = judged(peers=Peers(False, "peer-b does not list 10.0.0.2 healthy"))
    assert v.unknown and "peer-b" in v.why


def test_the_peers_health_is_this_engines_when_no_other_engine_serves():
    # up only 10 minutes (no Up-time argument), the other engine in a cold start
    v = judged(ctr(status="Up 10 minutes"), others={"r1": not_serving("r1 runs but has not logged its ready line")})
    assert v.serving and "no other engine serves" in v.why
    assert judged(ctr(status="Up 10 minutes"), others={}).serving  # the only engine there is


def test_a_long_up_time_without_a_start_in_the_window_and_routed_peers_serves():
    v = judged(others={"r2": serving("r2 is ready")})
    assert v.serving and "9 days" in v.why and "route" in v.why


def test_a_short_up_time_with_another_engine_serving_is_unknown():
    v = judged(ctr(status="Up 10 minutes"), others={"r2": serving("r2 is ready")})
    assert v.unknown and "up only 10 minutes" in v.why


def test_an_unreadable_log_with_another_engine_serving_is_unknown():
    v = judged(log=LogWindow.unreadable("ComposeFailed: HTTP 500 no such file"), others={"r2": serving("r2 is ready")})
    assert v.unknown and "could not be read" in v.why and "500" in v.why


def test_an_unknown_other_engine_does_not_make_this_one_the_only_server():
    v = judged(ctr(status="Up 10 minutes"), others={"r2": unknown("r2: rotated")})
    assert v.unknown


def test_the_log_and_docker_come_before_live_evidence():
    assert judged(log=window(START, *RANKS)).not_serving  # a cold start, whatever the peers say
    assert judged(ctr(state="restarting", status="Restarting (1) 1 second ago")).not_serving


def test_base_verdict_never_uses_live_evidence():
    assert base_verdict("e", ctr(), window(*NOISE), ready_marks=MARKS, startup=STARTUP, ran_here=False).unknown
    assert base_verdict("e", None, window(), ready_marks=MARKS, startup=STARTUP, ran_here=False).not_serving


# -- the stop guard's rule --------------------------------------------------------------------------

def test_stopping_an_engine_known_not_to_serve_is_allowed():
    assert stop_refusal("old-r2", not_serving("cold start"), {"r1": not_serving("cold start")}, "gpu02") is None


def test_stopping_a_serving_engine_while_another_replica_serves_is_allowed():
    assert stop_refusal("old-r2", serving("ready"), {"r1": serving("ready")}, "gpu02") is None
    assert stop_refusal("old-r2", unknown("rotated"), {"r1": serving("ready")}, "gpu02") is None


def test_stopping_the_only_serving_engine_is_refused_in_one_line():
    why = stop_refusal("old-r2", serving("ready"), {"r1": not_serving("r1 runs but has not logged its ready line")}, "gpu02")
    assert why is not None and "refusing to stop old-r2" in why and "no other replica does" in why
    assert "Nothing was stopped" in why and "\n" not in why


def test_an_unknown_engine_is_not_stopped_unless_another_replica_is_known_to_serve():
    why = stop_refusal("old-r2", unknown("rotated; peers not asked"), {"r1": not_serving("cold start")}, "gpu02")
    assert why is not None and "unknown" in why and "nothing was stopped" in why


def test_an_unknown_other_replica_never_permits_a_stop():
    why = stop_refusal("old-r2", serving("ready"), {"r1": unknown("rotated")}, "gpu02")
    assert why is not None and "unknown (rotated)" in why


VERDICTS = st.builds(Verdict, st.sampled_from(list(State)), st.text(max_size=5))


@given(VERDICTS, st.dictionaries(st.sampled_from(["r1", "r2a", "r2b"]), VERDICTS, max_size=3))
def test_a_stop_is_allowed_only_on_knowledge(mine, others):
    allowed = stop_refusal("e", mine, others, "gpu02") is None
    assert allowed == (mine.not_serving or any(v.serving for v in others.values()))


# -- how it is said ----------------------------------------------------------------------------------

def test_unknown_is_said_unknown():
    assert unknown("its log could not be read").phrase() == "unknown (its log could not be read)"
    assert not_serving("exited").phrase() == "NOT serving (exited)"
    assert serving("ready").phrase() == "serving"


def test_the_relays_health_is_live_evidence_for_its_engine():
    v = judged(ctr(status="Up 10 minutes"), others={"r2": serving("ready")}, peers=None, relay="the soak relay :8008 answers /health")
    assert v.serving and ":8008" in v.why


def test_published_ports_are_read_from_docker_ps():
    from orchestrator.engine.rules.serving_evidence import publishes

    def c(ports):
        return Container(id="r", name="relay", image="nginx", state="running", status="Up", created_at="t", raw={"Ports": ports})

    assert publishes(c("0.0.0.0:8008-8009->8008-8009/tcp"), 8009)
    assert publishes(c("0.0.0.0:8008->8008/tcp, :::8008->8008/tcp"), 8008)
    assert not publishes(c("8000/tcp"), 8000)  # exposed, not published
    assert not publishes(c(""), 8008) and not publishes(c("0.0.0.0:8008-8009->8008-8009/tcp"), 8010)


def test_a_window_shows_an_engine_past_its_start_only_by_its_work():
    from orchestrator.engine.rules.serving_evidence import past_its_start

    assert past_its_start(NOISE[:1])
    assert past_its_start(["[TP0] Decode batch, #running-req: 3"])
    assert not past_its_start(["[TP0] Capture cuda graph begin.", "Loading safetensors checkpoint shards: 50%"])


def test_a_long_up_time_needs_a_window_that_shows_work():
    # mutation: `past_its_start(log.lines)` removed from judge's Up-time rule -> serving
    quiet = window(*["[TP0] Capture cuda graph begin."] * 500)
    assert judged(log=quiet, others={"r2": serving("r2 is ready")}).unknown


def test_a_whole_log_without_a_start_is_not_started_yet_only_on_a_container_just_started():
    few = LogWindow(list(NOISE[:3]), asked=5000)  # fewer lines than asked for: all docker keeps
    v = judged(ctr(status="Up 3 seconds"), log=few, peers=None)
    assert v.unknown and "has not logged its start yet" in v.why and "rotated" not in v.why
    assert "up only 3 seconds" in v.why
    # up for days with fewer lines than asked: docker's rotation dropped the start (short-log hosts)
    v = judged(ctr(status="Up 2 days"), log=few, peers=None)
    assert v.unknown and "its start rotated out" in v.why and "not logged its start yet" not in v.why
    assert "fewer than the 5000 asked" in v.why
    full = LogWindow(["noise"] * 50, asked=50)  # as many as asked: older lines may have rotated out
    assert "(rotated)" in judged(log=full, peers=None).why
    assert "(rotated)" in judged(log=window(*NOISE), peers=None).why  # a read that does not say what it asked


# -- the soak relay's word, taken right before a step stopped the relay --------------------------

def test_the_relays_word_before_it_stopped_counts_for_the_same_container_only():
    from orchestrator.engine.rules.serving_evidence import relay_word

    seen = {"e": {"id": "abc", "said": "the soak relay :8008 (its replica's port) answers /health"}}
    said = relay_word(seen, "e", ctr())
    assert said is not None and said.startswith("the soak relay :8008") and "same container" in said
    assert judged(log=window(*NOISE[:40]), peers=Peers(False, "peer-b does not list it"), relay=said).serving
    replaced = Container(id="def", name="e", image="img", state="running", status="Up 1 minute", created_at="t", service="e")
    assert relay_word(seen, "e", replaced) is None
    assert relay_word(None, "e", ctr()) is None
    # a start logged since (no ready line after it) is still NOT serving, whatever the relay said
    assert judged(log=window(START, *RANKS), relay=said).not_serving
