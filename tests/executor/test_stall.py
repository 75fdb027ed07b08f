"""A runner that loses the CPU is not a host that ran out of time (issue 22).

On a loaded machine a scaled-clock test (3000 simulated seconds per real second) can lose the CPU
for a second between reading the host and checking its deadline: 50 simulated minutes. Every
wait loop judges its deadline by when its last observation *began*, so a stall after an
observation is never read as time the condition had to come true: the loop looks again. In
production the same holds for a runner suspended (a laptop lid) between a read and the check.

Each test stalls the runner right after an observation that saw the condition not yet met (the
fake host advances the clock past the deadline inside the read) and the next observation sees it
met. Without the rule: the down is sent again / the gate fails.
"""

from __future__ import annotations

from fakes import NEW_R2, OLD_R2, R1, RB, TAG, Rig, ctx_at, engine_log


async def test_a_stall_while_a_down_settles_sends_no_second_down():
    rig = Rig(state="r2.stop-old", ctx=ctx_at())
    rig.compose.run(OLD_R2)
    rig.compose.run(R1)
    reads = []

    def down_takes_a_moment(verb, req, env):
        if verb == "down":
            from orchestrator.hosts.clients.compose_manager import StreamOutcome

            return StreamOutcome("success", 0, [f" ✔ Container {OLD_R2}  Stopping"])
        return None

    def stall_after_the_first_read(compose):
        if not compose.sent("down"):
            return
        reads.append(rig.clock.now)
        if len(reads) == 1:
            # the runner loses the CPU right after this read: longer than the gone timeout
            rig.clock.now += RB.timeouts.gone + RB.timeouts.stop_grace + 60
        elif len(reads) == 2:
            compose.host.pop(OLD_R2, None)  # the down took effect in the meantime

    rig.compose.on_send = down_takes_a_moment
    rig.compose.on_ps = stall_after_the_first_read
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.dry-run"), note
    assert [r.services for r in rig.compose.sent("down")] == [(OLD_R2,)]  # never sent again


async def test_a_stall_during_a_cold_start_is_not_a_timeout():
    rig = Rig(state="r2.cold-start", ctx=ctx_at())
    rig.compose.run(R1)
    c = rig.compose.run(NEW_R2, file=RB.file, tag=TAG, log=engine_log(ready=False), started=0.0)
    reads = []
    real_logs = rig.compose.logs

    async def logs_then_stall(file, services, tail, project=None):
        text = await real_logs(file, services, tail, project)
        reads.append(text)
        if len(reads) == 1:
            rig.clock.now += RB.timeouts.cold_start + 60  # lost the CPU after reading: no ready line yet
            c.log = engine_log()  # the engine became ready meanwhile
        return text

    rig.compose.logs = logs_then_stall  # type: ignore[method-assign]
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.relay-dry-run"), note
    assert len(reads) >= 2
