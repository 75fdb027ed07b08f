"""A resumed cold-start gate whose engine's start rotated out of a short log (every engine keeps
only its last N lines): what the gate journaled (RunContext.milestones) counts, and live evidence
stands in for the lines it lost (orchestrator/engine/rules/cold_start.py, through steps/logs.py).

Mutation list (each guard changed in the source, the tests run and seen failing, the source
restored):
- rules/cold_start.py:ColdStartWatch._restore, `self.journal.held = dict(rec)` removed ->
  test_a_resumed_gate_counts_what_it_journaled_and_passes_on_live_evidence (HALT);
- steps/logs.py:cold_start, `rt.serving(service, live=verdict.live)` -> `rt.serving(service)` ->
  test_the_ready_line_alone_does_not_stand_in_for_rotated_milestones (ok on the log's ready line);
- ColdStartWatch.window, the `self.journal.restarted_in` check removed ->
  test_a_startup_line_other_than_the_journaled_one_fails;
- steps/logs.py:cold_start, the journal's write removed -> test_the_gate_journals_its_milestones_as_it_sees_them;
- steps/logs.py:cold_start, `created=rt.ctx.created` -> `created=()` ->
  test_an_engine_this_run_created_passes_on_live_evidence_without_a_journal (HALT);
- ColdStartWatch.window, the loss on a follower gap removed -> both
  test_a_cold_start_rotated_out_between_two_polls_* (FAIL at the deadline: a rollback of a ready engine);
- ColdStartWatch._at_deadline, the deadline's question removed -> the same tests (FAIL at the deadline);
- ColdStartWatch._judge_lines, the loss on a first window past the start without its startup line
  removed -> test_a_first_read_after_the_start_rotated_out_passes_on_live_evidence (FAIL at the
  deadline: the rollback of a ready engine);
- `not self.resumed` removed from that check -> test_a_resumed_gate_that_lost_nothing_fails_on_the_oom_that_follows
  (a journaled milestone read as the window's own: live evidence passes an engine whose next line is an OOM);
- ON_EVIDENCE[(DEADLINE, NOT_SERVING)] -> HALT ->
  test_a_cold_start_rotated_out_between_two_polls_still_fails_when_known_not_serving (HALT).
"""

from __future__ import annotations

from fakes import NEW_R2, R1, RANK_BUDGET, RB, READY, STARTUP, TAG, Rig, ctx_at
from orchestrator.engine.context import RunContext
from orchestrator.engine.rules.cold_start import line_hash
from orchestrator.hosts.clients.errors import TransportError

NOISE = ['INFO:     127.0.0.1:53826 - "GET /health HTTP/1.1" 200 OK'] * 500
BUDGET_LINE = f"rank_budget_bytes={RANK_BUDGET}"
HICACHE = "HiCache startup RAM allocated"


def at_cold_start(log: list[str], *, started: float = -7200.0, **kw) -> tuple[Rig, str]:
    rig = Rig(state="r2.cold-start", ctx=ctx_at(**kw))
    rig.compose.run(R1)  # serving (its whole log)
    cid = rig.compose.run(NEW_R2, file=RB.file, tag=TAG, log=log, started=started).id
    return rig, cid


def journal(rig: Rig, cid: str, *, per_rank=(BUDGET_LINE,), start: str = STARTUP.format(api_key=""), last: str = "a line long gone"):
    rig.ctx.milestones[NEW_R2] = {"container": cid, "per_rank": {p: [0, 1, 2, 3] for p in per_rank}, "once": [],
                                  "start": line_hash(start), "last": line_hash(last)}


async def test_a_resumed_gate_counts_what_it_journaled_and_passes_on_live_evidence():
    # crashed mid cold start after the budget lines; down two hours: the engine's 500 lines are
    # health checks only. The peers route to gpu02 and it has run longer than a cold start,
    # showing it working: live evidence says it serves (before: HALT, "scrolled out")
    rig, cid = at_cold_start(list(NOISE))
    journal(rig, cid)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.relay-dry-run"), note
    assert "rotated out of its log unread" in note and "live evidence says it serves" in note and BUDGET_LINE in note
    assert rig.ctx.ready[NEW_R2] == cid


async def test_an_engine_this_run_created_passes_on_live_evidence_without_a_journal():
    # killed right after the apply (no gate poll yet): the container is this run's (ctx.created)
    rig, cid = at_cold_start(list(NOISE))
    rig.ctx.created[cid] = {"service": NEW_R2, "state": "r2.apply"}
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.relay-dry-run"), note


async def test_the_ready_line_alone_does_not_stand_in_for_rotated_milestones():
    # nothing live decides (a peer cannot be asked): the log's ready line is not live evidence
    rig, cid = at_cold_start(list(NOISE) + [READY])
    journal(rig, cid)
    rig.clients.peers[1].error = TransportError("model-proxy:peer-b", "connection refused")
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED"), note
    assert "scrolled out of the log window" in note and "seen before the resume" in note
    assert rig.compose.sent("down") == []


async def test_a_start_rotated_out_mid_cold_start_completes_from_the_journal():
    # down five minutes mid cold start, the budget lines (journaled) rotated out; the rest comes
    # in the window: the journal and the window together are every milestone
    tail = [f"[TP{i}] {HICACHE}" for i in range(4)] + [READY]
    rig, cid = at_cold_start(tail, started=-300.0)
    journal(rig, cid)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.relay-dry-run"), note
    assert "every rank logged its milestones" in note and "saw before its resume" in note


async def test_a_startup_line_other_than_the_journaled_one_fails():
    # the engine started again inside its container while no runner watched
    rig, cid = at_cold_start([STARTUP.format(api_key="")] + [f"[TP{i}] {BUDGET_LINE}" for i in range(4)], started=-300.0)
    journal(rig, cid, start="[2026-01-01 00:00:00] server_args=ServerArgs(an earlier start)")
    [(event, note, to)] = await rig.step()
    assert event == "fail" and "started again inside its container while no runner watched" in note, note


async def test_the_gate_journals_its_milestones_as_it_sees_them():
    rig, cid = at_cold_start([STARTUP.format(api_key="")] + [f"[TP{i}] {BUDGET_LINE}" for i in range(4)], started=0.0)
    rig.compose.host[NEW_R2].script = [(600.0, READY)]  # the HiCache lines never come: it times out
    [(event, note, to)] = await rig.step()
    assert event == "fail", note
    saved = RunContext.from_json(rig.journal.get_run(rig.run.run_id).context).milestones[NEW_R2]
    assert saved["container"] == cid and saved["per_rank"][BUDGET_LINE] == [0, 1, 2, 3] and saved["start"]
    assert saved["per_rank"][HICACHE] == []



def rotated_between_polls(later: list[tuple[float, str]]) -> tuple[Rig, str]:
    """Explorer seed 169 (50-line logs, a loaded machine): the gate saw the start and the budget
    lines, then the engine logged the rest of its cold start, its ready line and more than its log
    keeps before the next poll (the follower reports a gap), then `later`."""
    start = [STARTUP.format(api_key="")] + [f"[TP{i}] {BUDGET_LINE}" for i in range(4)]
    rig, cid = at_cold_start(start, started=0.0)
    ctr = rig.compose.host[NEW_R2]
    ctr.script = [(45.0, ln) for ln in [f"[TP{i}] {HICACHE}" for i in range(4)] + [READY] + NOISE[:120]] + later
    full = ctr.lines
    ctr.lines = lambda now: full(now)[-50:]  # type: ignore[method-assign]  # docker keeps the last 50 lines
    rig.ctx.created[cid] = {"service": NEW_R2, "state": "r2.apply"}
    return rig, cid


async def test_a_cold_start_rotated_out_between_two_polls_passes_on_live_evidence():
    # it goes on answering health checks: once docker says it has run longer than a cold start and
    # the peers route to the host, live evidence says it serves (before: FAIL at the deadline, and
    # the phase's rollback stopped the healthy new engine)
    rig, cid = rotated_between_polls([(60.0 * k, NOISE[0]) for k in range(1, 70)])
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.relay-dry-run"), note
    assert "rotated out of its log unread" in note and "live evidence says it serves" in note
    assert rig.ctx.ready[NEW_R2] == cid


async def test_a_cold_start_rotated_out_between_two_polls_halts_when_nothing_decides():
    # nothing live decides by the deadline (a peer cannot be asked): a human judges it, nothing stopped
    rig, _ = rotated_between_polls([])
    rig.clients.peers[1].error = TransportError("model-proxy:peer-b", "connection refused")
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED"), note
    assert "scrolled out of the log window" in note and rig.compose.sent("down") == []


async def test_a_cold_start_rotated_out_between_two_polls_still_fails_when_known_not_serving():
    # docker's health says it is still starting: it is not serving, so the gate fails at the deadline
    # (the phase's rollback follows), as without the lost lines
    rig, _ = rotated_between_polls([])
    rig.compose.host[NEW_R2].status = "Up 50 minutes (health: starting)"
    [(event, note, to)] = await rig.step()
    assert event == "fail" and "did not finish its cold start" in note, note


def first_read_after_it_rotated(later: list[tuple[float, str]]) -> tuple[Rig, str]:
    """Explorer seed 53 (50-line logs, a loaded machine): the rollout was Ctrl-C'd as r2's cold start
    began, before its gate read a line (nothing journaled); `serve` adopted the run a lease later,
    when r2 had finished its start and logged more than its log keeps: the adopted gate's first
    window holds the last milestones, the ready line and health checks, no startup line."""
    window = [f"[TP{i}] {HICACHE}" for i in (2, 3)] + [READY] + NOISE[:47]
    rig, cid = at_cold_start(window, started=-600.0)  # Up 10 minutes: not longer than a whole cold start
    rig.compose.host[NEW_R2].script = later
    rig.ctx.created[cid] = {"service": NEW_R2, "state": "r2.apply"}
    return rig, cid


async def test_a_first_read_after_the_start_rotated_out_passes_on_live_evidence():
    # before: the gate waited for milestones that had gone by and FAILed at the deadline; the
    # phase's rollback stopped the ready new r2 (I2)
    rig, cid = first_read_after_it_rotated([(60.0 * k, NOISE[0]) for k in range(1, 70)])
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.relay-dry-run"), note
    assert "rotated out of its log unread" in note and "live evidence says it serves" in note
    assert rig.compose.sent("down") == []


async def test_a_first_read_after_the_start_rotated_out_halts_when_nothing_decides():
    rig, _ = first_read_after_it_rotated([])
    rig.clients.peers[1].error = TransportError("model-proxy:peer-b", "connection refused")
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED"), note
    assert rig.compose.sent("down") == []


async def test_a_first_window_that_begins_at_the_start_is_judged_by_its_lines():
    # a first read that holds the startup line lost nothing: the milestones decide (here: the
    # HiCache lines never come, the gate fails at the deadline as before)
    start = [STARTUP.format(api_key="")] + [f"[TP{i}] {BUDGET_LINE}" for i in range(4)] + [READY]
    rig, cid = at_cold_start(start, started=-600.0)
    rig.ctx.created[cid] = {"service": NEW_R2, "state": "r2.apply"}
    [(event, note, to)] = await rig.step()
    assert event == "fail" and "did not finish its cold start" in note and HICACHE in note, note


def resumed_losing_nothing(later: list[tuple[float, str]], **kw) -> tuple[Rig, str]:
    """A resumed gate that saw the start and the four budget lines (journaled), down five minutes:
    its short log rotated the startup line out, but the last line it journaled is still in the
    window, so nothing was lost and the window's lines decide (found by a review of seed 53's fix)."""
    last = "[TP0] Load weight end. mem usage=40.1 GB"
    rig, cid = at_cold_start([last, f"[TP0] {HICACHE}", f"[TP1] {HICACHE}"], started=-300.0, **kw)
    journal(rig, cid, last=last)
    rig.compose.host[NEW_R2].script = later
    return rig, cid


async def test_a_resumed_gate_that_lost_nothing_fails_on_the_oom_that_follows():
    rig, _ = resumed_losing_nothing([(30.0, "[TP2] torch.OutOfMemoryError: CUDA out of memory")])
    rig.compose.host[NEW_R2].status = "Up 5 minutes (healthy)"
    [(event, note, to)] = await rig.step()
    assert event == "fail" and "CUDA out of memory" in note, (event, to, note)


async def test_a_resumed_gate_that_lost_nothing_fails_at_the_deadline_when_it_hangs():
    rig, _ = resumed_losing_nothing([])
    rig.clients.peers[1].error = TransportError("model-proxy:peer-b", "connection refused")
    [(event, note, to)] = await rig.step()
    assert event == "fail" and "did not finish its cold start" in note, (event, to, note)
