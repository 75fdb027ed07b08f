"""The serving model in the executor, with logs that docker's rotation cut short (issue 21 case 11).

Mutation list (each guard changed in the source, the tests run and seen failing, the source
restored):
- runtime.py:StopGuard.stop_guard, `if mine.not_serving: continue` -> `if not mine.serving:`
  (an unknown engine stopped) -> test_an_unknown_engine_is_not_stopped_without_a_serving_other;
  `if refusal: return refusal` disabled -> test_a_rotated_old_r2_is_not_stopped_while_r1_cold_starts;
- runtime.py:Serving.serving, the peers not asked (`peers=None`) ->
  test_a_rotated_old_r2_is_not_stopped_while_r1_cold_starts (refused, but as "unknown", not as
  the only serving engine) and test_a_rotated_r1_serves_and_the_old_r2_is_stopped (HALT);
- runtime.py:Neighbours.peers_view, a peer that cannot be asked counted as routing ->
  test_an_unknown_engine_is_not_stopped_without_a_serving_other;
- runtime.py:Serving.host_now, "NOT serving (...)" for anything not serving ->
  test_host_now_says_unknown_when_the_log_cannot_be_read;
- steps/gates.py:soak, `if verdict.not_serving` -> `if not verdict.serving` ->
  test_the_soak_watches_an_engine_whose_serving_is_unknown (the soak fails);
- steps/gates.py:cold_start, the `long_up(...)` alternative removed ->
  test_a_cold_start_gate_whose_start_rotated_out_halts_at_once (it waits 50 minutes, then FAIL).
"""

from __future__ import annotations

from fakes import NEW_R2, OLD_R2, R1, RB, READY, STARTUP, TAG, Rig, ctx_at, engine_log
from orchestrator.hosts.clients.errors import ServerError, TransportError

NOISE = ['INFO:     127.0.0.1:53826 - "GET /health HTTP/1.1" 200 OK'] * 500
DAYS = -9 * 86400.0  # started nine days ago


def rotated(rig: Rig, service: str, **kw):
    return rig.compose.run(service, log=list(NOISE), started=DAYS, **kw)


def at_stop_old() -> Rig:
    return Rig(state="r2.stop-old", ctx=ctx_at())


async def test_a_rotated_old_r2_is_not_stopped_while_r1_cold_starts():
    rig = at_stop_old()
    rotated(rig, OLD_R2)
    rig.compose.run(R1, log=engine_log(ready=False), started=-600.0)  # restarted ten minutes ago
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED"), note
    assert f"refusing to stop {OLD_R2}: it serves, and no other replica does" in note
    assert rig.compose.sent("down") == []


async def test_a_rotated_r1_serves_and_the_old_r2_is_stopped():
    rig = at_stop_old()
    rotated(rig, OLD_R2)
    rotated(rig, R1)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.dry-run"), note
    assert [r.services for r in rig.compose.sent("down")] == [(OLD_R2,)]


async def test_an_unknown_engine_is_not_stopped_without_a_serving_other():
    # both rotated and a peer cannot be asked: nothing live decides; unknown never permits a stop
    rig = at_stop_old()
    rotated(rig, OLD_R2)
    rotated(rig, R1)
    rig.clients.peers[1].error = TransportError("model-proxy:peer-b", "connection refused")
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED"), note
    assert f"refusing to stop {OLD_R2}: whether it serves is unknown" in note and "peer-b could not be asked" in note
    assert rig.compose.sent("down") == []


async def test_the_soak_watches_an_engine_whose_serving_is_unknown():
    # r1 restarted 20 minutes ago (before this run's soak) and logged more than its window since:
    # it is not known to serve, nor known not to. The soak watches it rather than failing.
    rig = Rig(state="r2.soak", ctx=ctx_at())
    rig.compose.run(NEW_R2, file=RB.file, tag=TAG, started=-600.0)
    rig.compose.run(R1, log=list(NOISE), started=-1200.0)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r1.stop-old"), note
    notes = [f["text"] for k, f in rig.progress.events if k == "note"]
    assert any(f"whether {R1} serves is unknown" in t for t in notes), notes


async def test_the_soak_fails_on_an_engine_known_not_to_serve():
    rig = Rig(state="r2.soak", ctx=ctx_at())
    rig.compose.run(NEW_R2, file=RB.file, tag=TAG, started=-600.0)
    rig.compose.run(R1, log=list(NOISE) + [STARTUP.format(api_key="")], started=DAYS)
    [(event, note, to)] = await rig.step()
    assert event == "fail" and R1 in note and "ready line" in note


async def test_a_cold_start_gate_whose_start_rotated_out_halts_at_once():
    # a resumed gate on an engine up two hours whose 500-line window holds neither its start nor
    # its milestones: they will never come, so it halts now (nothing stopped) instead of timing out
    rig = Rig(state="r2.cold-start", ctx=ctx_at())
    rig.compose.run(R1)
    rig.compose.run(NEW_R2, file=RB.file, tag=TAG, log=list(NOISE) + [READY], started=-7200.0)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED"), note
    assert "scrolled out of the log window" in note and rig.clock.now == 0.0
    assert rig.compose.sent("down") == []


async def test_host_now_says_unknown_when_the_log_cannot_be_read():
    rig = at_stop_old()
    rotated(rig, OLD_R2)
    rig.compose.run(R1, started=DAYS)

    async def logs_500(*a, **kw):
        raise ServerError("compose-manager", "HTTP 500 open /app/work/x.yaml: no such file or directory")

    rig.compose.logs = logs_500
    line = await rig.ex.rt.host_now()
    assert "NOT serving" not in line, line
    assert f"{R1} unknown (" in line and "could not be read" in line and "500" in line, line


# -- placement ------------------------------------------------------------------------------------
# Mutation: steps/checks.py:host_state_check, the `if down:` refusal removed ->
# test_a_host_at_target_with_an_engine_in_a_cold_start_is_not_done fails (DONE "nothing to do").

def at_target(r1_log: list[str]) -> Rig:
    from test_preflight import place

    rig = Rig(state="preflight.host-state", ctx=ctx_at())
    place(rig, old_r2=None, new_r2="new", r1="new", shared="new")
    rig.compose.host[R1].log = list(r1_log)
    return rig


async def test_a_host_at_target_with_an_engine_in_a_cold_start_is_not_done():
    rig = at_target(engine_log(ready=False))  # r1 restarted and is in a cold start
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("fail", "ABORTED"), note
    assert f"{R1} NOT serving" in note and "Nothing was changed" in note
    assert rig.ctx.placement.serving[R1] == "not serving"
    assert not rig.compose.sent("up") and not rig.compose.sent("down")


async def test_a_host_at_target_with_rotated_logs_is_done():
    rig = at_target(list(NOISE))
    rig.compose.host[R1].started = DAYS
    rig.compose.host[NEW_R2].log = list(NOISE)
    rig.compose.host[NEW_R2].started = DAYS
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("skip", "DONE"), note
    assert rig.ctx.placement.serving == {R1: "serving", NEW_R2: "serving"}


# -- the soak relay's /health: live evidence for one engine -----------------------------------------
# Mutations: runtime.py:Serving._relay_health returning None at once ->
# test_the_relays_health_makes_a_recently_restarted_r1_known_to_serve fails (HALT);
# `except ClientError: return None` made to return the evidence ->
# test_a_relay_that_answers_502_is_no_evidence fails (the down is sent).

class _Relay:
    def __init__(self, ok: bool, seen: list) -> None:
        self.ok, self.seen = ok, seen

    async def health(self) -> None:
        self.seen.append("health")
        if not self.ok:
            raise ServerError("soak-relay", "HTTP 502 Bad Gateway", status=502)


def with_relay(rig: Rig, *, ok: bool) -> list:
    from orchestrator.hosts.parsers.docker_ps import Container

    seen: list = []
    plain = rig.compose.ps

    async def ps(*a, **kw):
        out = await plain(*a, **kw)
        return out + [Container(id="relay-1", name="glm53-soak-relay", image="nginx", state="running", status="Up 3 days",
                                created_at="t", service="glm53-soak-relay",
                                raw={"Ports": "0.0.0.0:8008-8009->8008-8009/tcp"})]

    rig.compose.ps = ps
    rig.use(relay=lambda url, token: _Relay(ok, seen))
    return seen


def at_stop_old_with_a_young_r1() -> Rig:
    # r1 restarted 20 minutes ago and logged more than its window since; the old r2 up 9 days,
    # both rotated: neither the log nor the peers tell which one carries the host's traffic
    rig = at_stop_old()
    rotated(rig, OLD_R2)
    rig.compose.run(R1, log=list(NOISE), started=-1200.0)
    return rig


async def test_the_relays_health_makes_a_recently_restarted_r1_known_to_serve():
    rig = at_stop_old_with_a_young_r1()
    seen = with_relay(rig, ok=True)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.dry-run"), note
    assert seen and [r.services for r in rig.compose.sent("down")] == [(OLD_R2,)]


async def test_a_relay_that_answers_502_is_no_evidence():
    rig = at_stop_old_with_a_young_r1()
    seen = with_relay(rig, ok=False)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED"), note
    assert seen and rig.compose.sent("down") == []
    assert f"{R1} unknown" in note or "unknown (" in note


# -- a resumed cold-start gate whose start rotated out, for a gate that needs only the ready line ---
# Mutations: steps/gates.py:_start_rotated_out, the `gate.required_per_rank` condition
# removed -> test_a_cold_start_gate_whose_start_rotated_out_halts_at_once fails (it passes a
# budget gate unverified); the forbidden-line condition removed ->
# test_a_rotated_start_with_a_failure_line_in_the_window_halts fails; the `long_up` condition
# removed -> test_a_young_rotated_engine_is_not_taken_as_started fails.

def at_cold_start_old(log: list[str], started: float) -> Rig:
    """r2's rollback: the old FP8 r2 is back (cold-start-old has no per-rank milestones)."""
    rig = Rig(state="r2.rollback.cold-start-old", ctx=ctx_at())
    rig.compose.run(R1)
    rig.compose.run(OLD_R2, log=log, started=started)
    return rig


async def test_a_rotated_start_of_a_long_running_engine_passes_a_ready_line_gate():
    rig = at_cold_start_old(list(NOISE), -7200.0)
    [(event, note, to)] = await rig.step()
    assert event == "ok", note
    assert "rotated out" in note and "without a restart" in note and "serving:" in note


async def test_a_rotated_start_with_a_failure_line_in_the_window_halts():
    rig = at_cold_start_old(list(NOISE) + ["[TP1] NCCL error in: ProcessGroupNCCL.cpp"], -7200.0)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED"), note


async def test_a_young_rotated_engine_is_not_taken_as_started():
    # up 10 minutes with 500 lines and no start: not long enough to call its start finished
    rig = at_cold_start_old(list(NOISE) * 8, -600.0)
    [(event, note, to)] = await rig.step()
    assert event != "ok", note


async def test_a_rotated_start_of_an_engine_docker_calls_unhealthy_halts():
    # mutation: `if not verdict.not_serving` in ColdStart's rotated path made unconditional -> passes
    rig = at_cold_start_old(list(NOISE), -7200.0)
    rig.compose.host[OLD_R2].status = "Up 2 hours (unhealthy)"
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED"), note


async def test_a_rotated_window_that_shows_no_work_halts():
    # mutation: the `past_its_start` condition in _start_rotated_out removed -> passes
    rig = at_cold_start_old(["[TP0] Capturing batches (bs=32): 50%"] * 500, -7200.0)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED"), note
