"""The `logs:` step's handler (orchestrator/engine/steps/logs.py) where it decides without the
watcher: an engine the dry run left unchanged and that serves has no cold start to watch.

Mutation list (each guard deleted in the source, the test run and seen failing, the source restored):
- logs.py:_no_cold_start, the `unchanged` shortcut removed ->
  test_an_unchanged_engine_that_serves_has_no_cold_start_to_watch fails (HALT: its start rotated out);
- its `if verdict.serving` made unconditional ->
  test_an_unchanged_engine_that_does_not_serve_is_watched fails (OK without a cold start);
- logs.py:cold_start, `read_due = now + FULL_READ_S` -> `now + 1e9` (no full read while the
  probes say quiet) -> test_a_line_the_probes_cannot_tell_apart_is_read_within_a_full_read_interval
  fails (the ready line is never read: FAIL at the deadline);
- logs.py:cold_start, `scrub_lines=rt.scrub_lines` not given to the watcher ->
  test_the_gates_line_hides_a_secret_split_across_two_reads fails (the token's tail is shown; a
  whole token is still hidden where the event leaves, `Voice.emit`);
- rules/cold_start.py:ColdStartWatch._tail, `self._held = False` (a line that may begin a secret
  shown at once) -> test_the_gates_line_hides_a_secret_split_across_two_reads fails (the head is shown);
- runtime.py:Voice.emit, the fields passed unscrubbed -> test_the_run_pages_tail_of_the_log_is_redacted
  fails only together with the mutation above (the watcher scrubs what it hands out).
"""

from __future__ import annotations

from test_gates import MILESTONES, at_cold_start, timeline
from test_gates_probes import PROBE_S, probed

from fakes import NEW_R2, R1, RB, READY, SECRETS, STARTUP, TAG, Rig, ctx_at, engine_log
from orchestrator.engine.steps.logs import FULL_READ_S

NOISE = ['INFO:     127.0.0.1:53826 - "GET /health HTTP/1.1" 200 OK'] * 500


def unchanged(log: list[str], *, started: float) -> Rig:
    """r2's dry run planned no change to the new r2, already running."""
    rig = Rig(state="r2.cold-start", ctx=ctx_at(plans={"r2.dry-run": {"actions": {NEW_R2: "unchanged"}, "verdict": "ok"}}))
    rig.compose.run(R1)
    rig.compose.run(NEW_R2, file=RB.file, tag=TAG, log=log, started=started)
    return rig


async def test_an_unchanged_engine_that_serves_has_no_cold_start_to_watch():
    # up two hours, its start rotated out of its log; the peers route to the host: it serves
    rig = unchanged(list(NOISE), started=-7200.0)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.relay-dry-run"), note
    assert note == f"{NEW_R2} was already serving on this definition: no cold start"


async def test_an_unchanged_engine_that_does_not_serve_is_watched():
    # in a cold start (a startup line, no ready line yet): the gate watches it to its ready line
    rig = unchanged([STARTUP.format(api_key="")], started=0.0)
    rig.compose.host[NEW_R2].script = [(60.0, ln) for ln in engine_log()[1:]]
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.relay-dry-run"), note
    assert "every rank logged its milestones and the ready line" in note and READY not in note


async def test_a_line_the_probes_cannot_tell_apart_is_read_within_a_full_read_interval():
    # the ready line, then a health check verbatim like the last line read: every `--tail 1` probe
    # shows that line and says nothing is new; the full read every FULL_READ_S finds the ready line
    health = NOISE[0]
    rig = probed(at_cold_start(log=[STARTUP.format(api_key=""), *MILESTONES, health], script=[(100.0, READY), (100.0, health)]))
    [(event, note, _)] = await rig.step()
    assert event == "ok", note
    assert 100.0 < rig.clock.now <= 100.0 + FULL_READ_S + rig.poll
    assert rig.compose.log_tails.count(1) >= 100.0 / PROBE_S - 5  # the probes ran (and said quiet)


async def test_the_run_pages_tail_of_the_log_is_redacted():
    # sglang prints its server_args, api key included; the run page's tail and line show it scrubbed
    key = SECRETS["PROXY_TOKEN"]
    rig = at_cold_start(script=timeline(STARTUP.format(api_key=key), *MILESTONES, READY))
    [(event, note, _)] = await rig.step()
    assert event == "ok", note
    tails = [f["lines"] for kind, f in rig.progress.events if kind == "log_tail"]
    assert any("api_key='***'" in ln for lines in tails for ln in lines), tails
    assert key not in repr(rig.progress.events)


async def test_the_gates_line_hides_a_secret_split_across_two_reads():
    # the token's head ends one line, its tail starts the milestone line read a minute later:
    # the gate's line is scrubbed with the line before it, so neither half reaches the page
    key = SECRETS["HF_TOKEN"]
    head, tail = key[:10], key[10:]
    rig = at_cold_start(script=timeline(STARTUP.format(api_key="x"), f"loading with {head}",
                                        f"{tail} {MILESTONES[0]}", *MILESTONES[1:], READY))
    [(event, note, _)] = await rig.step()
    assert event == "ok", note
    shown = [f["line"] for kind, f in rig.progress.events if kind == "log_line"]
    assert any(ln.startswith("*** ") for ln in shown), shown
    assert head not in repr(rig.progress.events) and tail not in repr(rig.progress.events)
