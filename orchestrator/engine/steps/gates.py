"""Gates that wait and watch: the soak relay, the peers and a completion, the soak and its watches
(forbidden log lines, and gauges through the relays)."""

from __future__ import annotations

from orchestrator.engine.steps.base import Activities, Node, Step, StepOutcome, error_text, fail, ok, register
from orchestrator.engine.steps.metrics import gauge_problem
from orchestrator.language.step_specs import RelaySpec, SoakSpec, VerifySpec


@register("relay")
async def relay(rt: Activities, node: Node, step: Step) -> StepOutcome:
    spec = step.spec(RelaySpec)
    env = await rt.ensure_env()
    client = rt.relay_client(spec.port, env.get(spec.token_variable, ""))
    deadline = rt.clock.monotonic() + rt.rb.timeouts.relay
    rt.emit("waiting", gate=f"soak relay :{spec.port} direct checks")
    while True:
        seen = rt.clock.monotonic()  # when this observation began: a stall after it is never read as time the condition had
        res = await client.direct_checks(rt.rb.model)
        if res.ok:
            return ok(f"relay :{spec.port}: /health ok, /v1/models lists {rt.rb.model}, deterministic generation non-empty")
        if seen >= deadline:
            return fail(f"relay :{spec.port} direct checks failed: {rt.scrub(res.reason)}")
        await rt.wait()


@register("verify")
async def verify(rt: Activities, node: Node, step: Step) -> StepOutcome:
    spec = step.spec(VerifySpec)
    addr = rt.entry.model_proxy_address
    if spec.peers:
        deadline = rt.clock.monotonic() + rt.rb.timeouts.discovery
        rt.emit("waiting", gate=f"both peers list {addr} healthy under {rt.rb.domains.long} only")
        while True:
            seen = rt.clock.monotonic()  # when this observation began: a stall after it is never read as time the condition had
            _, problems = await rt.peer_presence()
            if not problems:
                break
            if seen >= deadline:
                return fail("; ".join(problems))
            await rt.wait()
    notes = [f"both peers list {addr} healthy under the long domain only"] if spec.peers else []
    if spec.completion:
        for attempt in range(1, spec.attempts + 1):
            res = await rt.cache_hit_check()
            if res.ok:
                break
            if attempt == spec.attempts:
                return fail(f"completion check on {rt.entry.inference_endpoint}"
                            + (f" ({attempt} tries)" if attempt > 1 else "") + f": {rt.scrub(res.reason)}")
            await rt.wait()
        notes.append("completion and cache-hit follow-up passed" + (f" (try {attempt})" if attempt > 1 else ""))
    return ok("; ".join(notes))


@register("soak")
async def soak(rt: Activities, node: Node, step: Step) -> StepOutcome:
    """Watch every engine while the soak runs: a restart or an engine gone fails it. The time soaked
    and an approval are journaled: a resume continues the soak and never asks again."""
    spec = step.spec(SoakSpec)
    duration = rt.soak_override if rt.soak_override is not None else spec.duration
    already = float(rt.ctx.soaks.get(node.id, 0.0))
    start = rt.clock.monotonic() - already
    need_approval = spec.approval and not rt.yes
    watched = await rt.watch_engines()
    baseline = rt.ctx.soak_watch.get(node.id)
    if baseline is None:
        rt.ctx.soak_watch[node.id] = {svc: cid for svc, (cid, _) in watched.items()}
    else:  # a resumed soak: what ran when it started must still run, unreplaced
        for svc, cid in baseline.items():
            now = watched.get(svc)
            if now is None:
                return fail(f"during the soak: {svc} is gone from docker/ps (seen on resume)")
            if now[0] != cid:
                return fail(f"during the soak: {svc} was replaced while no runner watched (container ID changed)")
    replaced = rt.check_ready_unchanged(watched)
    if replaced:
        return fail(f"during the soak: {replaced}")
    for svc in watched:
        # an engine known not to serve fails the soak; an unknown one is watched, not failed:
        # failing a healthy host's soak would roll back what serves
        verdict = await rt.serving(svc)
        if verdict.not_serving:
            return fail(f"during the soak: {verdict.why}")
        if verdict.unknown:
            rt.emit("note", text=f"soak: whether {svc} serves is unknown ({verdict.why}); it is watched for a restart or exit")
    logs = ForbiddenLines(rt, list(watched)) if spec.watch_logs and rt.rb.log_gates.forbidden else None
    gauges = SoakGaugeWatch(rt, spec) if spec.metrics else None
    rt.start_heartbeat()
    announced = False
    last_saved = rt.clock.monotonic()
    while True:
        problem = await rt.engines_still_serving(watched)
        if problem is None and logs is not None:
            problem = await logs.problem()
        if problem is None and gauges is not None:
            problem = await gauges.problem()
        if problem:
            return fail(f"during the soak: {problem}")
        elapsed = rt.clock.monotonic() - start
        if rt.clock.monotonic() - last_saved >= 60:
            rt.ctx.soaks[node.id] = elapsed
            rt.save_context()
            last_saved = rt.clock.monotonic()
        approvals = rt.approvals()
        approved = (not need_approval) or bool({node.id, "*"} & approvals)
        ended_early = approved and bool({f"{node.id}!now", "*!now"} & approvals)
        if (elapsed >= duration or ended_early) and approved:
            if spec.approval and rt.yes:
                rt.approve(node.id, by="--yes")
            rt.ctx.soaks[node.id] = elapsed
            return ok(f"soaked {int(elapsed)} s" + (" and approved" if spec.approval else "")
                      + (" (ended early by the approval)" if ended_early and elapsed < duration else ""))
        rt.tick(f"soak of {', '.join(sorted(watched))}", start, duration,
                lambda: {"awaiting": "approval" if need_approval and not approved and elapsed >= duration else "time"})
        if not announced:
            gate = f"soak {int(duration)} s"
            if need_approval and not approved:
                gate += f", then `orchestrate approve {rt.run.run_id}`"
            elif need_approval:
                gate += " (already approved)"
            rt.emit("waiting", gate=gate)
            announced = True
        await rt.wait(min(rt.poll, max(0.0, duration - elapsed)) if elapsed < duration else rt.poll)


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
