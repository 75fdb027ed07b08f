"""The soak's watches (steps/gates.py polls them): forbidden log lines, and gauges through the relays."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.engine.steps.activities import Activities
    from orchestrator.language.runbook import SoakSpec


class ForbiddenLines:
    """Each watched engine's new lines against `log_gates.forbidden`. An engine that passed its cold
    start in this run is judged from its last ready line on (the whole first read if it scrolled
    out); any other from the soak's first read on (its history is not this run's to judge). Lines
    lost in a gap between two polls are not judged; the gap is noted."""

    def __init__(self, rt: Activities, services: list[str]) -> None:
        self.rt = rt
        self.followers = {svc: rt.raw_follower(svc) for svc in services}
        self.unread = set(services)

    async def problem(self) -> str | None:
        g = self.rt.rb.log_gates
        for svc, follower in self.followers.items():
            batch = await follower.poll()
            lines = [ln.text for ln in batch.new]
            if batch.gap and svc not in self.unread:
                self.rt.emit("note", text=f"soak: {svc} logged more than the follower's window between two reads: "
                                          f"some of its lines were not judged")
            if svc in self.unread:
                self.unread.discard(svc)
                if svc not in self.rt.ctx.ready:
                    continue  # the baseline: judged from here on
                ready = [i for i, text in enumerate(lines) if any(m in text for m in g.required)]
                lines = lines[ready[-1] + 1:] if ready else lines
            for i, text in enumerate(lines):
                bad = next((b for b in g.forbidden if b in text), None)
                if bad is not None:  # judged raw, quoted scrubbed with the lines around it
                    shown = self.rt.scrub_lines(lines[max(0, i - 1):i + 2])[min(i, 1)]
                    return f"{svc} logged a forbidden line ({bad}): {shown.strip()[:200]}"
        return None


class SoakGaugeWatch:
    """Every gauge of `soak.metrics` read through its relay at each poll: a reading outside its bounds
    fails the soak; an unreadable relay is tolerated for 2 polls in a row, not 3."""

    MISSES = 3

    def __init__(self, rt: Activities, soak: SoakSpec) -> None:
        self.rt = rt
        self.soak = soak
        self.misses: dict[int, int] = {}

    async def problem(self) -> str | None:
        from orchestrator.engine.steps.base import error_text
        from orchestrator.engine.steps.metrics import gauge_problem

        env = await self.rt.ensure_env()
        for m in self.soak.metrics:
            client = self.rt.relay_client(m.relay.port, env.get(m.relay.token_variable, ""))
            try:
                text = await client.metrics_text()
            except Exception as exc:  # the relay client's errors, counted, then named
                self.misses[m.relay.port] = self.misses.get(m.relay.port, 0) + 1
                if self.misses[m.relay.port] >= self.MISSES:
                    return f"relay :{m.relay.port} could not be read {self.MISSES} times in a row: {self.rt.scrub(error_text(exc))}"
                continue
            self.misses[m.relay.port] = 0
            for g in m.gauges:
                bad = gauge_problem(text, g)
                if bad is not None:
                    return f"relay :{m.relay.port}: {self.rt.scrub(bad)}"
        return None
