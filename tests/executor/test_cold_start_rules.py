"""The cold-start watcher (orchestrator/engine/rules/cold_start.py), pure: fed docker/ps rows, log
windows, the time and serving evidence, each rule of the `logs:` gate pinned by a verdict.

The handler's end-to-end behaviour stays pinned by test_gates.py, test_cold_start_resume.py,
test_serving_rotation.py, test_gates_probes.py and test_remedy_gate.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from orchestrator.engine.rules.cold_start import (
    SAVE_EVERY_S,
    ColdStartWatch,
    Kind,
    Loss,
    OutOfStep,
    Question,
    Show,
    Verdict,
    line_hash,
    long_up,
)
from orchestrator.engine.rules.serving_evidence import Verdict as Serving
from orchestrator.engine.rules.serving_evidence import not_serving, serving, unknown
from orchestrator.hosts.log_gate import LogGate
from orchestrator.hosts.parsers.docker_ps import Container
from orchestrator.hosts.redaction import Redactor

SVC = "model-r2"
CID = "c0ffee"
BUDGET = 1000
STARTUP = "server_args=ServerArgs("
START = f"[2026-12-04 10:00:00] {STARTUP}model_path='/models/glm', tp_size=2)"
READY = "The server is fired up and ready to roll!"
HICACHE = "HiCache startup RAM allocated"
FORBIDDEN = ["OutOfMemoryError", "CUDA out of memory", "NCCL error"]
COLD_START_S = 3000.0
WINDOW = 4000
HEALTH = 'INFO:     127.0.0.1:53826 - "GET /health HTTP/1.1" 200 OK'
LOADING = "[TP0] Capturing batches (bs=32): 50%"


def budget(rank: int, value: int = BUDGET) -> str:
    return f"[2026-12-04 10:01:00 TP{rank}] rank_budget_bytes={value}"


def hicache(rank: int) -> str:
    return f"[2026-12-04 10:02:00 TP{rank}] {HICACHE}"


MILESTONES = [budget(0), budget(1), hicache(0), hicache(1)]


def row(cid: str = CID, *, state: str = "running", status: str = "Up 5 minutes") -> Container:
    return Container(id=cid, name=SVC, image="sglang", state=state, status=status, created_at="t", service=SVC)


def watcher(*, per_rank: bool = True, journaled: dict | None = None, created: tuple[str, ...] = (), window: int = WINDOW,
            scrub: Callable[[str], str] = lambda text: text) -> ColdStartWatch:
    """A watch begun at t=0; `per_rank=False`: a gate of the ready line alone (a rollback target's)."""
    gate = LogGate(2, ["rank_budget_bytes={rank_budget_bytes}", HICACHE], [READY], list(FORBIDDEN),
                   expected_rank_budget=BUDGET if per_rank else None)
    return ColdStartWatch(service=SVC, gate=gate, startup=STARTUP, window=window, cold_start_s=COLD_START_S, now=0.0,
                          journaled=journaled, created=created, scrub_lines=lambda lines: [scrub(t) for t in lines])


@dataclass
class Seen:
    """One observation as the handler drives it."""

    verdict: Verdict
    asked: list[tuple[Question, bool]] = field(default_factory=list)
    journal: dict | None = None
    shows: list[Show] = field(default_factory=list)
    read: bool = False


def see(w: ColdStartWatch, now: float, c: Container | None, lines: list[str] = (), *, gap: bool = False,
        answers: dict[Question, Serving] | None = None) -> Seen:
    """Observe at `now`: feed `lines` when asked to read, `answers` when asked for evidence."""
    v = w.observe(now, c)
    seen = Seen(v)
    while True:
        if v.journal is not None:
            seen.journal = v.journal
        if v.show is not None:
            seen.shows.append(v.show)
        if v.kind is Kind.READ:
            seen.read = True
            v = w.window(list(lines), gap)
        elif v.kind is Kind.ASK:
            assert v.question is not None
            seen.asked.append((v.question, v.live))
            if answers is None or v.question not in answers:
                raise AssertionError(f"asked {v.question} unexpectedly")
            v = w.evidence(answers[v.question])
        else:
            break
    seen.verdict = v
    return seen


def journal_of(*, cid: str = CID, per_rank: dict | None = None, once: list[str] = (), start: str = START,
               last: str | None = "a line long gone") -> dict:
    """A record as `RunContext.milestones[service]` holds it (the format every journaled run has)."""
    rec = {"container": cid, "per_rank": per_rank if per_rank is not None else {f"rank_budget_bytes={BUDGET}": [0, 1]},
           "once": list(once), "start": line_hash(start) if start else "", "last": line_hash(last) if last else ""}
    return rec


LIVE_SERVING = {Question.LIVE: serving("the peers route to the host"), Question.DEADLINE: serving("the relay answers")}
LIVE_UNKNOWN = {Question.LIVE: unknown("peer-b could not be asked"), Question.DEADLINE: unknown("peer-b could not be asked")}


# -- lines decide: milestones per rank, the ready line ---------------------------------------------

def test_every_rank_then_the_ready_line_passes_and_names_the_container():
    w = watcher()
    s = see(w, 0.0, row(), [START, *MILESTONES, READY])
    assert s.verdict.kind is Kind.PASS and s.verdict.ready == CID
    assert s.verdict.why == f"{SVC}: every rank logged its milestones and the ready line"
    with pytest.raises(OutOfStep):  # decided: it takes no more observations
        w.observe(30.0, row())


def test_the_ready_line_before_every_rank_logged_does_not_pass():
    w = watcher()
    s = see(w, 0.0, row(), [START, budget(0), budget(1), hicache(0), READY])
    assert s.verdict.kind is Kind.WAIT
    assert w.gate.missing() == [f"'{HICACHE}' from TP1"]
    s = see(w, 30.0, row(), [hicache(1)])
    assert s.verdict.kind is Kind.PASS


def test_milestones_are_counted_per_rank_across_windows():
    w = watcher()
    assert see(w, 0.0, row(), [START, budget(1), hicache(0)]).verdict.kind is Kind.WAIT
    assert w.gate.missing() == [f"'rank_budget_bytes={BUDGET}' from TP0", f"'{HICACHE}' from TP1", repr(READY)]
    assert w.progress()["seen"] == {f"rank_budget_bytes={BUDGET}": ["TP1"], HICACHE: ["TP0"]}
    assert see(w, 30.0, row(), [budget(0), hicache(1), READY]).verdict.kind is Kind.PASS


def test_a_forbidden_line_fails_with_the_line_its_record_and_the_failure_lines_after_it():
    oom = "[TP1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    after = ["Traceback (most recent call last):", "[TP1] NCCL error in: ProcessGroupNCCL.cpp", oom, "[TP0] CUDA out of memory (2)",
             "[TP0] CUDA out of memory (3)"]
    w = watcher(scrub=lambda t: t.replace("2.00 GiB", "<n>"))
    s = see(w, 0.0, row(), [START, budget(0), oom, *after])
    v = s.verdict
    assert v.kind is Kind.FAIL
    assert v.line == oom and v.record == (oom, *after)
    # the line, then at most two other failure lines after it (never itself again), redacted
    assert v.why == (f"{SVC}: forbidden log line (OutOfMemoryError): {oom.replace('2.00 GiB', '<n>')} | "
                     f"[TP1] NCCL error in: ProcessGroupNCCL.cpp | [TP0] CUDA out of memory (2)")


def test_a_rank_budget_other_than_the_runbooks_fails():
    s = see(watcher(), 0.0, row(), [START, budget(0), budget(1, 999)])
    assert s.verdict.kind is Kind.FAIL and s.verdict.line == budget(1, 999).strip()
    assert "TP1 logged rank_budget_bytes=999, expected 1000" in s.verdict.why


def test_a_gate_of_the_ready_line_alone_does_not_judge_the_budget():
    s = see(watcher(per_rank=False), 0.0, row(), [START, budget(0, 7), READY])
    assert s.verdict.kind is Kind.PASS


def test_lines_are_judged_before_the_containers_state():
    # the ready line came in the same read as docker's `restarting`: the read decides first
    s = see(watcher(), 0.0, row(state="restarting", status="Restarting (1) 2 seconds ago"), [START, *MILESTONES, READY])
    assert s.verdict.kind is Kind.PASS


# -- restarts -------------------------------------------------------------------------------------

def test_a_new_container_id_fails_before_its_log_is_read():
    w = watcher()
    see(w, 0.0, row(), [START])
    s = see(w, 30.0, row("d00d"), [START])
    assert s.verdict.kind is Kind.FAIL and not s.read
    assert s.verdict.why == f"{SVC} restarted during its cold start (container ID changed)"


def test_a_second_startup_line_fails():
    w = watcher()
    see(w, 0.0, row(), [START, budget(0)])
    s = see(w, 30.0, row(), [budget(1), "[2026-12-04 10:09:00] " + STARTUP + "again)", READY])
    assert s.verdict.kind is Kind.FAIL and "second startup line: [2026-12-04 10:09:00] server_args" in s.verdict.why


def test_restarting_fails_with_the_last_line_and_a_heartbeat_but_no_tail():
    w = watcher()
    see(w, 0.0, row(), [START, budget(0)])
    s = see(w, 30.0, row(state="restarting", status="Restarting (1) 2 seconds ago"), [budget(1)])
    assert s.verdict.kind is Kind.FAIL
    assert s.verdict.why == f"{SVC} is restarting (Restarting (1) 2 seconds ago); last line: {budget(1)}"
    assert s.shows == [Show()]  # the heartbeat came before the state's check; the lines are not shown


def test_restarting_before_any_line_says_no_last_line():
    s = see(watcher(), 0.0, row(state="restarting", status="Restarting (1) 2 seconds ago"), [])
    assert s.verdict.why == f"{SVC} is restarting (Restarting (1) 2 seconds ago)"


@pytest.mark.parametrize("state", ["exited", "dead"])
def test_an_exit_fails(state):
    s = see(watcher(), 0.0, row(state=state, status="Exited (1) 3 seconds ago"), [START])
    assert s.verdict.kind is Kind.FAIL
    assert s.verdict.why == f"{SVC} exited during its cold start (Exited (1) 3 seconds ago); last line: "


# -- the clock ------------------------------------------------------------------------------------

def test_nothing_listed_waits_then_times_out_without_reading():
    w = watcher()
    s = see(w, 0.0, None)
    assert s.verdict.kind is Kind.WAIT and not s.read and s.shows == []
    s = see(w, COLD_START_S, None)
    assert s.verdict.kind is Kind.FAIL and not s.read
    assert s.verdict.why == (f"{SVC} did not finish its cold start within 50 min; missing: 'rank_budget_bytes={BUDGET}' from "
                             f"TP0, TP1; '{HICACHE}' from TP0, TP1; {READY!r}")


def test_the_deadline_is_the_observations_time_at_or_after_the_limit():
    w = watcher()
    assert see(w, 0.0, row(), [START]).verdict.kind is Kind.WAIT
    assert see(w, COLD_START_S - 0.001, row(), []).verdict.kind is Kind.WAIT
    s = see(w, COLD_START_S, row(), [budget(0)])
    assert s.verdict.kind is Kind.FAIL and "did not finish its cold start within 50 min" in s.verdict.why
    assert s.shows and s.shows[-1].tail == (budget(0),)  # the last read is shown before the verdict


def test_a_deadline_with_nothing_lost_never_asks_for_evidence():
    w = watcher(created=(CID,))
    see(w, 0.0, row(), [START])
    s = see(w, COLD_START_S, row(), [HEALTH])
    assert s.verdict.kind is Kind.FAIL and s.asked == []


# -- lines lost between two reads (the follower's gap) -----------------------------------------------

def lost_between_reads(**kw) -> ColdStartWatch:
    w = watcher(**kw)
    assert see(w, 0.0, row(), [START, budget(0), budget(1)]).verdict.kind is Kind.WAIT
    return w


def test_a_gap_with_new_lines_asks_live_evidence_of_an_engine_this_run_created():
    w = lost_between_reads(created=(CID,))
    s = see(w, 30.0, row(), [HEALTH], gap=True, answers=LIVE_SERVING)
    assert w.loss is Loss.LINES and s.asked == [(Question.LIVE, True)]
    assert s.verdict.kind is Kind.PASS and s.verdict.ready == CID
    assert s.verdict.why == (f"{SVC}: lines of its cold start rotated out of its log unread (seen before: nothing yet; not in "
                             f"the log now: '{HICACHE}' from TP0, TP1; {READY!r}), and live evidence says it serves: the peers "
                             f"route to the host")


def test_a_gap_whose_evidence_does_not_say_serving_goes_on_watching():
    w = lost_between_reads(created=(CID,))
    s = see(w, 30.0, row(), [HEALTH], gap=True, answers=LIVE_UNKNOWN)
    assert s.verdict.kind is Kind.WAIT
    s = see(w, 60.0, row(), [hicache(0), hicache(1), READY], answers=LIVE_UNKNOWN)
    assert s.verdict.kind is Kind.PASS and s.asked == []  # the lines still decide when they can


def test_a_gap_on_an_engine_neither_created_nor_resumed_asks_nothing():
    w = lost_between_reads()
    s = see(w, 30.0, row(), [HEALTH], gap=True)
    assert w.loss is Loss.LINES and s.asked == [] and s.verdict.kind is Kind.WAIT
    s = see(w, COLD_START_S, row(), [HEALTH])
    assert s.verdict.kind is Kind.FAIL and s.asked == []


def test_a_gap_without_new_lines_loses_nothing():
    w = lost_between_reads(created=(CID,))
    assert see(w, 30.0, row(), [], gap=True).verdict.kind is Kind.WAIT
    assert w.loss is Loss.NONE


def test_a_gap_reported_on_the_first_window_loses_nothing():
    w = watcher(created=(CID,))
    see(w, 0.0, row(), [START, budget(0)], gap=True)
    assert w.loss is Loss.NONE


@pytest.mark.parametrize("answer,kind,says", [
    (serving("the relay answers"), Kind.PASS, "live evidence says it serves: the relay answers"),
    (unknown("peer-b could not be asked"), Kind.HALT, "; live evidence: unknown (peer-b could not be asked)), so its milestones"),
    (not_serving("docker: health: starting"), Kind.FAIL, "did not finish its cold start within 50 min"),
], ids=["serving-passes", "unknown-halts", "not-serving-fails"])
def test_at_the_deadline_with_lines_lost_live_evidence_decides(answer, kind, says):
    w = lost_between_reads(created=(CID,))
    see(w, 30.0, row(), [HEALTH], gap=True, answers={Question.LIVE: unknown("not yet")})
    s = see(w, COLD_START_S, row(status="Up 50 minutes"), [], answers={Question.DEADLINE: answer})
    assert s.asked == [(Question.DEADLINE, True)]
    assert s.verdict.kind is kind and says in s.verdict.why, s.verdict.why
    if kind is Kind.PASS:
        assert s.verdict.ready == CID
        assert s.verdict.why.startswith(f"{SVC}: lines of its cold start rotated out of its log unread (not in the log now: ")
    if kind is Kind.HALT:
        assert s.verdict.why.startswith(f"{SVC}: its start scrolled out of the log window (0 lines read; docker: Up 50 minutes")
        assert "nothing was stopped" in s.verdict.why


def test_the_deadline_asks_nothing_of_an_engine_no_longer_listed():
    w = lost_between_reads(created=(CID,))
    see(w, 30.0, row(), [HEALTH], gap=True, answers={Question.LIVE: unknown("not yet")})
    s = see(w, COLD_START_S, None)
    assert s.verdict.kind is Kind.FAIL and s.asked == []


# -- the first window holds no startup line --------------------------------------------------------

def test_a_full_first_window_without_a_start_halts_at_once_nothing_asked():
    # the start rotated out and will not come back; an engine neither created nor resumed: a human judges it
    w = watcher(window=500)
    s = see(w, 0.0, row(), [HEALTH] * 499)
    assert w.loss is Loss.START and s.asked == []
    assert s.verdict.kind is Kind.HALT
    assert s.verdict.why == (f"{SVC}: its start scrolled out of the log window (499 lines read; docker: Up 5 minutes), so its "
                             f"milestones cannot be checked; nothing was stopped. Judge the engine by hand, then resume")


def test_a_first_window_one_line_short_of_full_is_not_taken_as_full():
    w = watcher(window=500)
    s = see(w, 0.0, row(), [LOADING] * 498)
    assert w.loss is Loss.NONE and s.verdict.kind is Kind.WAIT


def test_a_first_window_without_a_start_of_a_long_running_engine_lost_its_start():
    w = watcher()
    s = see(w, 0.0, row(status="Up 2 hours"), [LOADING] * 3)
    assert w.loss is Loss.START and s.verdict.kind is Kind.HALT and "(3 lines read; docker: Up 2 hours)" in s.verdict.why


@pytest.mark.parametrize("answer,kind", [(serving("the peers route to the host"), Kind.PASS),
                                         (unknown("peer-b could not be asked"), Kind.HALT),
                                         (not_serving("docker: unhealthy"), Kind.HALT)],
                         ids=["serving", "unknown", "not-serving"])
def test_a_start_lost_for_good_of_an_engine_this_run_created_asks_live_evidence(answer, kind):
    w = watcher(created=(CID,))
    s = see(w, 0.0, row(status="Up 2 hours"), [HEALTH] * 3, answers={Question.LIVE: answer})
    assert s.asked == [(Question.LIVE, True)] and s.verdict.kind is kind
    if kind is Kind.HALT:
        assert s.verdict.why.endswith(f"docker: Up 2 hours; live evidence: {answer.phrase()}), so its milestones cannot be "
                                      f"checked; nothing was stopped. Judge the engine by hand, then resume")


def test_a_start_lost_for_good_stays_lost_for_good_when_the_window_also_shows_work():
    # a full window of health checks also reads as "past its start": that never makes the loss smaller
    w = watcher(window=500)
    s = see(w, 0.0, row(), [hicache(1), *[HEALTH] * 498])
    assert w.loss is Loss.START and s.verdict.kind is Kind.HALT


def test_a_first_window_past_its_start_of_an_engine_this_run_created_asks_live_evidence():
    # the start and the first milestones rotated out before the first read (a short log)
    w = watcher(created=(CID,))
    s = see(w, 0.0, row(status="Up 10 minutes"), [hicache(1), READY, HEALTH], answers=LIVE_SERVING)
    assert w.loss is Loss.LINES and s.asked == [(Question.LIVE, True)] and s.verdict.kind is Kind.PASS


@pytest.mark.parametrize("window", [[hicache(1)], [HEALTH], ["Decode batch. #running-req: 1"]],
                         ids=["a-milestone", "a-health-check", "a-batch"])
def test_a_first_window_past_its_start_loses_lines(window):
    w = watcher()
    s = see(w, 0.0, row(), window)
    assert w.loss is Loss.LINES and s.verdict.kind is Kind.WAIT  # not created, not resumed: nothing to ask


def test_a_first_window_without_a_start_that_shows_no_work_loses_nothing():
    # a young engine's window that is not full and shows neither a milestone nor work lost nothing
    # the gate can know of: the lines decide (its milestones are still to come)
    w = watcher(created=(CID,))
    s = see(w, 0.0, row(), [LOADING] * 5)
    assert w.loss is Loss.NONE and s.asked == [] and s.verdict.kind is Kind.WAIT


def test_an_empty_first_window_is_not_a_lost_start():
    w = watcher(created=(CID,))
    assert see(w, 0.0, row(status="Up 2 hours"), []).verdict.kind is Kind.WAIT
    assert w.loss is Loss.NONE and not w.first_window


def test_a_first_window_that_begins_at_the_start_is_judged_by_its_lines():
    w = watcher(created=(CID,))
    s = see(w, 0.0, row(status="Up 2 hours"), [START, *MILESTONES[:2], READY, HEALTH])
    assert w.loss is Loss.NONE and s.verdict.kind is Kind.WAIT
    assert see(w, COLD_START_S, row(), []).verdict.kind is Kind.FAIL


# -- a start that rotated out of a gate of the ready line alone ----------------------------------------

@pytest.mark.parametrize("answer", [serving("docker: healthy"), unknown("peer-b could not be asked")], ids=["serving", "unknown"])
def test_a_finished_start_of_a_long_running_engine_passes_unless_known_not_serving(answer):
    w = watcher(per_rank=False)
    s = see(w, 0.0, row(status="Up 2 hours"), [HEALTH] * 3, answers={Question.FINISHED: answer})
    assert s.asked == [(Question.FINISHED, False)]  # the log's own evidence counts here
    assert s.verdict.kind is Kind.PASS and s.verdict.ready is None
    assert s.verdict.why == (f"{SVC}: its start rotated out of its log (the last 3 lines hold no start and no failure line, and "
                             f"show it answering health checks or serving) and docker says it has run 2 hours without a "
                             f"restart, longer than a whole cold start: its start finished; serving: {answer.state.value} "
                             f"({answer.why})")


def test_a_finished_start_known_not_serving_halts():
    w = watcher(per_rank=False)
    s = see(w, 0.0, row(status="Up 2 hours (unhealthy)"), [HEALTH] * 3,
            answers={Question.FINISHED: not_serving("docker: unhealthy")})
    assert s.verdict.kind is Kind.HALT and "scrolled out of the log window" in s.verdict.why


@pytest.mark.parametrize("case", ["per-rank-gate", "young", "not-running", "a-failure-line", "no-work"])
def test_a_start_is_not_taken_as_finished_without_every_sign(case):
    c = row(status="Up 2 hours")
    lines = [HEALTH] * 3
    per_rank = case == "per-rank-gate"
    if case == "young":
        c, lines = row(status="Up 10 minutes"), [HEALTH] * 499
    elif case == "not-running":
        c = row(state="restarting", status="Up 2 hours")
    elif case == "a-failure-line":
        lines = [*lines, "[TP1] NCCL error in: ProcessGroupNCCL.cpp"]
    elif case == "no-work":
        lines = [LOADING] * 3
    w = watcher(per_rank=per_rank, window=500)
    s = see(w, 0.0, c, lines)  # any question asked fails `see`
    assert s.asked == [] and s.verdict.kind is not Kind.PASS


def test_a_rotated_window_with_a_failure_line_halts_a_gate_that_was_not_resumed():
    # the line may be history of a long-running engine: a human judges it, nothing is stopped
    s = see(watcher(), 0.0, row(status="Up 2 hours"), [HEALTH, "[TP1] NCCL error in: ProcessGroupNCCL.cpp"])
    assert s.verdict.kind is Kind.HALT and "(2 lines read; docker: Up 2 hours)" in s.verdict.why


# -- a resumed gate (its journal) -----------------------------------------------------------------

def test_a_resumed_gate_counts_what_it_journaled_and_passes_on_the_rest():
    w = watcher(journaled=journal_of(last=budget(1)))
    s = see(w, 0.0, row(), [budget(1), hicache(0), hicache(1), READY])
    assert w.resumed and w.loss is Loss.NONE
    assert s.verdict.kind is Kind.PASS and s.verdict.why == (
        f"{SVC}: every rank logged its milestones and the ready line (with what this run saw before its resume: "
        f"'rank_budget_bytes={BUDGET}' from TP0, TP1)")


def test_a_journal_of_another_container_counts_for_nothing():
    w = watcher(journaled=journal_of(cid="an-earlier-one", last=budget(1)))
    s = see(w, 0.0, row(), [START, hicache(0), hicache(1), READY])
    assert not w.resumed and s.verdict.kind is Kind.WAIT
    assert w.gate.missing()[0] == f"'rank_budget_bytes={BUDGET}' from TP0, TP1"


def test_a_journal_restores_only_what_the_gate_asks_for():
    rec = journal_of(per_rank={f"rank_budget_bytes={BUDGET}": [0, 1, 7], "not a milestone": [0]}, once=[READY, "stale"])
    w = watcher(journaled=rec)
    see(w, 0.0, row(), [START])
    assert w.gate.seen == {f"rank_budget_bytes={BUDGET}": {0, 1}, HICACHE: set()} and w.gate.seen_once == {READY}


def test_a_resumed_gate_that_lost_nothing_fails_on_the_oom_that_follows():
    # the startup line rotated out but the journaled last line is still in the window: nothing was lost
    last = "[TP0] Load weight end. mem usage=40.1 GB"
    w = watcher(journaled=journal_of(last=last))
    s = see(w, 0.0, row(status="Up 5 minutes (healthy)"), [last, hicache(0)])
    assert w.loss is Loss.NONE and s.asked == [] and s.verdict.kind is Kind.WAIT
    s = see(w, 30.0, row(), ["[TP1] torch.OutOfMemoryError: CUDA out of memory"])
    assert s.verdict.kind is Kind.FAIL and "CUDA out of memory" in s.verdict.why


def test_a_resumed_gate_that_lost_nothing_times_out_when_it_hangs():
    last = "[TP0] Load weight end. mem usage=40.1 GB"
    w = watcher(journaled=journal_of(last=last))
    see(w, 0.0, row(), [last, hicache(0), HEALTH])  # shows work, but a resumed gate's lines were not lost
    assert w.loss is Loss.NONE
    s = see(w, COLD_START_S, row(), [])
    assert s.verdict.kind is Kind.FAIL and s.asked == []


def test_a_resumed_gate_that_lost_lines_asks_live_evidence():
    w = watcher(journaled=journal_of())
    s = see(w, 0.0, row(), [HEALTH, READY], answers=LIVE_SERVING)
    assert w.loss is Loss.LINES and s.asked == [(Question.LIVE, True)]
    assert s.verdict.kind is Kind.PASS and f"seen before: 'rank_budget_bytes={BUDGET}' from TP0, TP1;" in s.verdict.why


def test_a_resumed_gate_that_lost_lines_and_learns_nothing_live_halts_at_the_deadline():
    w = watcher(journaled=journal_of())
    assert see(w, 0.0, row(), [HEALTH, READY], answers=LIVE_UNKNOWN).verdict.kind is Kind.WAIT
    s = see(w, COLD_START_S, row(), [], answers=LIVE_UNKNOWN)
    assert s.verdict.kind is Kind.HALT and s.verdict.why.startswith(
        f"{SVC}: its start scrolled out of the log window (0 lines read; docker: Up 5 minutes; seen before the resume: "
        f"'rank_budget_bytes={BUDGET}' from TP0, TP1; live evidence: unknown (peer-b could not be asked))")


def test_a_journal_without_a_last_line_lost_everything_after_its_start():
    w = watcher(journaled=journal_of(last=None))
    see(w, 0.0, row(), [hicache(0)], answers=LIVE_UNKNOWN)
    assert w.loss is Loss.LINES


def test_a_resumed_gate_fails_on_a_failure_line_in_a_window_that_lost_its_start():
    # a resumed gate knows this container's start: a failure line after it is this start's
    w = watcher(journaled=journal_of())
    s = see(w, 0.0, row(status="Up 2 hours"), [HEALTH, "[TP1] NCCL error in: ProcessGroupNCCL.cpp"])
    assert s.verdict.kind is Kind.FAIL and "forbidden log line (NCCL error)" in s.verdict.why


def test_a_startup_line_other_than_the_journaled_one_fails():
    w = watcher(journaled=journal_of())
    s = see(w, 0.0, row(), ["[2026-12-04 11:00:00] " + STARTUP + "another start)", budget(0)])
    assert s.verdict.kind is Kind.FAIL and s.verdict.why == (
        f"{SVC} started again inside its container while no runner watched (its startup line is not the one this run saw "
        f"before)")


def test_the_journaled_startup_line_in_the_window_is_the_same_start():
    w = watcher(journaled=journal_of(last=budget(1)))
    s = see(w, 0.0, row(), [START, budget(0), budget(1), hicache(0)])
    assert s.verdict.kind is Kind.WAIT and w.starts == 1


def test_a_journaled_start_counts_as_the_first_startup_line_when_it_rotated_out():
    w = watcher(journaled=journal_of(last=budget(1)))
    assert see(w, 0.0, row(), [budget(1)]).verdict.kind is Kind.WAIT
    s = see(w, 30.0, row(), ["[2026-12-04 11:00:00] " + STARTUP + "again)"])
    assert s.verdict.kind is Kind.FAIL and "second startup line" in s.verdict.why


def test_a_resumed_gate_whose_journal_holds_no_start_counts_the_windows_own():
    w = watcher(journaled=journal_of(start="", last=budget(1)))
    s = see(w, 0.0, row(), [budget(1), START, hicache(0)])
    assert s.verdict.kind is Kind.WAIT and w.starts == 1


# -- the journal it hands back ------------------------------------------------------------------

def test_the_journal_is_handed_back_at_once_on_a_milestone_or_the_start():
    w = watcher()
    s = see(w, 0.0, row(), [START, budget(0)])
    assert s.journal == {"container": CID, "per_rank": {f"rank_budget_bytes={BUDGET}": [0], HICACHE: []}, "once": [],
                         "start": line_hash(START), "last": line_hash(budget(0))}
    s = see(w, 10.0, row(), [budget(1)])
    assert s.journal is not None and s.journal["per_rank"][f"rank_budget_bytes={BUDGET}"] == [0, 1]


def test_the_last_line_alone_is_journaled_at_most_every_save_interval():
    w = watcher()
    see(w, 0.0, row(), [START])
    assert see(w, 30.0, row(), [LOADING]).journal is None
    assert see(w, SAVE_EVERY_S - 0.001, row(), [LOADING + "!"]).journal is None
    s = see(w, SAVE_EVERY_S, row(), [LOADING + "?"])
    assert s.journal is not None and s.journal["last"] == line_hash(LOADING + "?")
    assert see(w, SAVE_EVERY_S + 1, row(), []).journal is None  # no line, nothing to journal


def test_a_restored_journal_is_not_handed_back_unchanged():
    w = watcher(journaled=journal_of(last=budget(1)))
    assert see(w, 10.0, row(), [budget(1), LOADING]).journal is None


def test_a_journal_handed_back_resumes_a_later_gate():
    first = watcher()
    s = see(first, 0.0, row(), [START, budget(0), budget(1)])
    again = watcher(journaled=s.journal)
    assert see(again, 0.0, row(), [budget(1), hicache(0), hicache(1), READY]).verdict.kind is Kind.PASS


def test_a_record_journaled_by_an_earlier_release_resumes_the_gate():
    # the literal record (hashes included) a run journaled before this watcher existed: its format
    # and its line hashes keep their meaning, or a resumed run would misread its own progress
    rec = {"container": CID, "per_rank": {f"rank_budget_bytes={BUDGET}": [0, 1], HICACHE: []}, "once": [],
           "start": "b937dc5c62f7e204", "last": "8311319b29033937"}
    assert (line_hash(START), line_hash(budget(0))) == (rec["start"], rec["last"])
    w = watcher(journaled=rec)
    s = see(w, 0.0, row(), [budget(0), hicache(0), hicache(1), READY])
    assert w.resumed and w.loss is Loss.NONE and s.verdict.kind is Kind.PASS


def test_the_journal_is_handed_back_before_live_evidence_is_asked():
    w = watcher(created=(CID,))
    v = w.observe(0.0, row())
    v = w.window([hicache(1), HEALTH])
    assert v.kind is Kind.ASK and v.journal is not None and v.journal["per_rank"][HICACHE] == [1]


# -- what the run page shows --------------------------------------------------------------------

def test_the_gates_line_is_shown_when_it_changes_and_the_tail_holds_the_last_eight_lines():
    w = watcher(scrub=str.upper)
    s = see(w, 0.0, row(), [START, budget(0), *[LOADING] * 9])
    assert s.shows == [Show(line=budget(0).upper(), tail=tuple(LOADING.upper() for _ in range(8)))]
    assert see(w, 30.0, row(), [LOADING]).shows == [Show(line=None, tail=(LOADING.upper(),))]
    assert see(w, 60.0, row(), []).shows == [Show()]
    assert see(w, 90.0, None).shows == []
    assert w.progress() == {"missing": w.gate.missing(), "seen": {f"rank_budget_bytes={BUDGET}": ["TP0"], HICACHE: []},
                            "last_line": budget(0).upper()[:160]}


# -- raw judging, scrubbed showing -----------------------------------------------------------------

SECRET = "hf_Q8vR2mK7pX4nT9wLzY3c"


def redacted_watcher(*secrets: str, **kw) -> ColdStartWatch:
    """A watcher showing lines through a run's redactor (`Voice.scrub_lines`)."""
    red = Redactor(*secrets)
    gate = LogGate(2, ["rank_budget_bytes={rank_budget_bytes}", HICACHE], [READY], list(FORBIDDEN), expected_rank_budget=BUDGET)
    return ColdStartWatch(service=SVC, gate=gate, startup=STARTUP, window=WINDOW, cold_start_s=COLD_START_S, now=0.0,
                          scrub_lines=lambda lines: red.scrub_lines(list(lines)), may_begin_secret=red.may_begin_secret, **kw)


def test_the_gate_judges_raw_text_a_secret_equal_to_the_ready_line_passes():
    # a declared secret whose value is the ready line: judged raw, the gate passes
    w = redacted_watcher(READY)
    assert see(w, 0.0, row(), [START, *MILESTONES, READY]).verdict.kind is Kind.PASS


def test_failure_evidence_hides_a_secret_split_across_the_failing_line_and_the_next():
    # the head of the token ends the OOM line, its tail starts the next: the evidence is scrubbed
    # as one window, so neither half is shown (line by line, the head would be)
    head, tail = SECRET[:11], SECRET[11:]
    oom = f"[TP1] torch.OutOfMemoryError: CUDA out of memory (token {head}"
    v = see(redacted_watcher(SECRET), 0.0, row(), [START, budget(0), oom, f"{tail}) [TP0] CUDA out of memory (2)"]).verdict
    assert v.kind is Kind.FAIL and v.line == oom.strip()
    assert head not in v.why and tail not in v.why and "***" in v.why, v.why


def test_shown_lines_hide_a_secret_split_across_two_reads():
    # the head ends the last line of one read, the tail starts the next read's first line: the
    # line that may begin a secret is held out of the first tail and shown with the second, both
    # scrubbed together; the gate's line is scrubbed with the line before it
    head, tail = SECRET[:11], SECRET[11:]
    w = redacted_watcher(SECRET)
    [first] = see(w, 0.0, row(), [START, f"loading with token {head}"]).shows
    assert first.tail == (START,), first
    [show] = see(w, 30.0, row(), [f"{tail} {budget(0)}"]).shows
    assert show.tail == ("loading with token ***", f"*** {budget(0)}"), show
    assert show.line == f"*** {budget(0)}".strip() and tail not in w.progress()["last_line"]
    [quiet] = see(w, 60.0, row(), [LOADING]).shows
    assert quiet.tail == (LOADING,)  # nothing held: only the new line


# -- the calls' order ------------------------------------------------------------------------------

def test_calls_out_of_step_raise():
    w = watcher(created=(CID,))
    with pytest.raises(OutOfStep):
        w.window([START])
    with pytest.raises(OutOfStep):
        w.evidence(serving("x"))
    assert w.observe(0.0, row()).kind is Kind.READ
    with pytest.raises(OutOfStep):
        w.observe(1.0, row())
    assert w.window([hicache(0), HEALTH]).kind is Kind.ASK
    with pytest.raises(OutOfStep):
        w.window([])
    assert w.evidence(serving("peers")).kind is Kind.PASS
    with pytest.raises(OutOfStep):
        w.observe(2.0, row())


def test_long_up_is_dockers_up_time_against_the_cold_start_limit():
    assert long_up(row(status="Up 50 minutes"), COLD_START_S)
    assert not long_up(row(status="Up 49 minutes"), COLD_START_S)
    assert not long_up(row(status="Exited (0) 2 hours ago"), COLD_START_S)
