"""Gates that wait and watch: an engine's cold start, the soak relay, the registry, the soak."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from orchestrator.hosts.log_gate import LogGate
from orchestrator.hosts.logfollow import FollowBatch
from orchestrator.engine.steps.cold_start_memory import ColdStartMemory
from orchestrator.engine.steps.checks import expected_rank_budget
from orchestrator.language.machine import Node
from orchestrator.language.runbook import SoakSpec, Step
from orchestrator.engine.steps.base import Described, StepOutcome, fail, halt, ok, register, remedy
from orchestrator.engine.steps.soak_watches import ForbiddenLines, SoakGaugeWatch  # noqa: F401 - the soak's watches
from orchestrator.hosts.parsers.docker_ps import by_service
from orchestrator.engine.rules.serving_evidence import past_its_start, up_seconds

if TYPE_CHECKING:
    from orchestrator.engine.executor.runtime import Runtime
    from orchestrator.hosts.parsers.docker_ps import Container


def long_up(c: "Container", cold_start_s: float) -> bool:
    """docker says the container has run longer than a whole cold start may take: a log window
    without its startup line has lost it to rotation (it will not come)."""
    up = up_seconds(c.status)
    return up is not None and up >= cold_start_s


#: While the cold-start gate's log probes say nothing is new, the log is still read whole this often
#: (a line repeated verbatim is not told apart by a probe).
FULL_READ_S = 60.0
#: A log that gave more new lines than this per second over the last poll interval is read at the
#: poll cadence without probes (each probe would bring a read of a few lines: more bytes per new
#: line than a poll's read). An SGLang cold start prints a few lines per milestone, minutes apart.
CHATTY_LINES_PER_S = 2.0


@register
class ColdStart(Described):
    """Follow an engine's log until every rank logs its milestones and the ready line.

    The first poll reads the engine's log from its container's start (a wide window), so a resume
    during or after a cold start judges the whole start, never a window that scrolled. A second
    startup line in the same container (a restart with the same ID) fails the gate, as does a new
    container ID, `restarting`, an exit, or a forbidden line.

    With a `remedy:` (runbook.Remedy): a forbidden line that carries the remedy's marker text sends
    REMEDY instead of FAIL while this run took the remedy fewer times than the table's cap for this
    state; the count is kept in the run's context (`ctx.remedies`), journaled with the transition.
    Any other failure (another forbidden line, a restart, a timeout) fails the gate as before.

    An engine whose cold start already passed in this run (`ctx.ready`, same container) and still
    serves passes at once: a remedy waiting for its sibling, or a gate after a remedy, must not halt
    because the sibling's start scrolled out of the log window while the remedy ran."""

    key = "logs"

    async def run(self, rt: "Runtime", node: Node, step: Step) -> StepOutcome:
        assert step.logs is not None
        await rt.ensure_env()
        service = step.logs.service
        actions: dict[str, str] = {}
        for sid in reversed(rt.table.phase_dry_runs(node.phase)):
            acts = rt.ctx.plans.get(sid, {}).get("actions", {})
            if service in acts:
                actions = acts
                break
        if actions.get(service) == "unchanged":
            verdict = await rt.serving(service)
            if verdict.serving:
                return ok(f"{service} was already serving on this definition: no cold start")
        ready_id = rt.ctx.ready.get(service)
        if ready_id is not None:
            # its cold start already passed in this run (a remedy waiting for its sibling, a gate
            # read again after a remedy): the same container, still serving, is not judged again
            # from a start that may have scrolled out of the log window since
            now = by_service(await rt.ps()).get(service)
            if now is not None and now.id == ready_id:
                verdict = await rt.serving(service)
                if verdict.serving:
                    return ok(f"{service} passed its cold start in this run (same container) and still serves")
        expected = expected_rank_budget(rt.ctx.budget, rt.rb, service) if step.logs.budget else None
        g = rt.rb.log_gates
        gate = LogGate(g.ranks, list(g.required_per_rank), list(g.required), list(g.forbidden), expected_rank_budget=expected)
        follower = rt.follower(service)
        memory = ColdStartMemory(rt, service, g.startup)
        resumed = lost = False
        lost_for_good = False  # the start rotated out of a window that will not bring it back (full, or a long-running engine)
        deadline = rt.clock.monotonic() + rt.rb.timeouts.cold_start
        first_id: str | None = None
        first_poll = True
        starts = 0
        shown = ""
        rt.emit("waiting", gate=f"{service}: " + ", ".join(gate.missing()))
        hb_start = rt.start_heartbeat()

        def progress() -> dict:
            return {"missing": gate.missing(), "seen": {p: [f"TP{i}" for i in sorted(r)] for p, r in gate.seen.items()},
                    "last_line": rt.scrub(gate.result.line)[:160]}
        # Between polls the log is probed (rt.wait_for_output): a probe that shows a new line has
        # the log read at once (docker/ps keeps its poll cadence); while the probes say nothing
        # is new the log read is skipped, but for one full read every FULL_READ_S.
        c = None
        waited = "unprobed"
        reads: deque[tuple[float, int]] = deque(maxlen=64)  # (when, new lines) of the recent log reads
        ps_due = read_due = rt.clock.monotonic()
        while True:
            now = rt.clock.monotonic()  # when this observation began: a stall after it is never read as time the condition had
            if c is None or waited == "unprobed" or now >= ps_due:
                c = by_service(await rt.ps()).get(service)
                ps_due = now + rt.poll
            if c is not None:
                if first_id is None:
                    first_id = c.id
                    resumed = memory.restore(c.id, gate)  # what this run saw of this container's start before
                if c.id != first_id:
                    return fail(f"{service} restarted during its cold start (container ID changed)")
                if waited == "quiet" and now < read_due:
                    batch = FollowBatch(new=[], gap=False, bytes_fetched=0, lines_fetched=0, fetches=0)
                else:
                    batch = await follower.poll()
                    read_due = now + FULL_READ_S
                    reads.append((now, len(batch.new)))
                texts = [ln.text for ln in batch.new]
                # the first window holds no startup line (a resumed gate, a start that rotated out)
                no_start = first_poll and not any(g.startup in t for t in texts)
                if first_poll and resumed and memory.restarted_in_window(texts):
                    return fail(f"{service} started again inside its container while no runner watched (its startup line is "
                                f"not the one this run saw before)")
                if no_start and resumed and memory.start:
                    starts = 1  # its start was seen before the resume: another startup line is a restart
                if no_start and batch.new:
                    lost_for_good = len(batch.new) >= follower.initial_tail - 1 or long_up(c, rt.rb.timeouts.cold_start)
                if no_start and batch.new and (
                        lost_for_good or (resumed and memory.lines_lost(texts))):
                    # a resumed gate whose engine has logged more than its log keeps since this run last read
                    # it: milestones may have rotated out unread. Never judge (or time out) blind: what the
                    # journal says was seen counts, and live evidence of a ready engine stands in for the rest
                    lost = True
                    finished = self._start_rotated_out(rt, c, gate, texts)
                    if finished is not None:
                        verdict = await rt.serving(service)
                        if not verdict.not_serving:
                            return ok(f"{service}: {finished}; serving: {verdict.state.value} ({verdict.why})")
                    if not resumed and any(bad in t for t in texts for bad in g.forbidden):
                        return halt(memory.rotated_text(c.status, len(texts), ""))
                if not first_poll and batch.gap and batch.new:
                    # lines rotated out between two polls unread (a short log, a slow poll; explorer seed
                    # 169): never a FAIL at the deadline for milestones that went by, live evidence decides
                    lost = True
                first_poll = False
                for idx, ln in enumerate(batch.new):
                    if g.startup in ln.text:
                        starts += 1
                        if starts > 1:
                            return fail(f"{service} restarted inside its container during its cold start (a second startup line: "
                                        f"{rt.scrub(ln.text)[:200]})")
                    res = gate.feed(ln.text)
                    if res.failed:
                        # the decisive evidence: this line and the other failure lines right after it
                        # (an OOM's traceback names the exception a few lines below the first sign)
                        more = [x.text.strip() for x in batch.new[idx + 1:idx + 200]
                                if any(bad in x.text for bad in g.forbidden) and x.text.strip() != res.line][:2]
                        evidence = " | ".join(rt.scrub(t)[:300] for t in [res.line, *more])
                        # the failing record: SGLang logs a start-up failure as one traceback whose
                        # first line (`Scheduler hit an exception`) is forbidden and whose last names
                        # the cause (`DistStoreError`): the remedy's marker is looked for in it all
                        record = [res.line, *(x.text for x in batch.new[idx + 1:idx + 200])]
                        if step.remedy is not None and len(record) < 50:
                            await rt.wait()  # the rest of the traceback may not be in this read yet
                            record += [x.text for x in (await follower.poll()).new][:200]
                        return self._failed_on_line(rt, node, step, record, f"{service}: {res.reason}: {evidence}")
                    if res.passed:
                        rt.ctx.ready[service] = c.id
                        return ok(f"{service}: {res.reason}" + (f" (with what this run saw before its resume: {memory.seen_text()})"
                                                               if resumed else ""))
                if no_start and batch.new and not lost and not resumed and (gate.progressed or past_its_start(texts)):
                    # the first window shows what an engine logs only after its start (a milestone, the
                    # ready line, serving work) but not its start: the start and what followed rotated out
                    # before this run's first read (a run adopted long after its engine started, a short
                    # log; explorer seed 53). Live evidence decides, never a FAIL at the deadline for
                    # milestones that went by unread. Not for a resumed gate: its progress includes what it
                    # journaled, and whether it lost lines is `memory.lines_lost` (above)
                    lost = True
                memory.note(gate, [ln.text for ln in batch.new])
                live = ""
                if lost and batch.new and (resumed or c.id in rt.ctx.created):  # an engine this run started
                    verdict = await rt.serving(service, live=True)
                    live = f"; live evidence: {verdict.phrase()}"
                    if verdict.serving:
                        rt.ctx.ready[service] = c.id
                        return ok(f"{service}: lines of its cold start rotated out of its log unread (seen before: "
                                  f"{memory.seen_text()}; not in the log now: {'; '.join(gate.missing())}), and live "
                                  f"evidence says it serves: {verdict.why}")
                if lost and batch.new and lost_for_good:
                    return halt(memory.rotated_text(c.status, len(batch.new), live))
                rt.tick(f"{service} cold start", hb_start, deadline - hb_start, progress)
                if c.restarting:
                    why = f"; {gate.result.reason}: {rt.scrub(gate.result.line)[:200]}" if gate.result.failed else (
                        f"; last line: {rt.scrub(gate.result.line)[:200]}" if gate.result.line else "")
                    return fail(f"{service} is restarting ({c.status}){why}")
                if c.state in ("exited", "dead"):
                    return fail(f"{service} exited during its cold start ({c.status}); last line: {rt.scrub(gate.result.line)[:200]}")
                if batch.new and gate.result.line and gate.result.line != shown:
                    shown = gate.result.line
                    rt.emit("log_line", service=service, line=rt.scrub(shown)[:200])
                if batch.new:  # the run page's live tail of the followed log (redacted, last lines only)
                    rt.emit("log_tail", service=service, lines=[rt.scrub(x.text)[:300] for x in batch.new[-8:]])
            if now >= deadline and lost and c is not None and (resumed or c.id in rt.ctx.created):  # never time out blind
                verdict = await rt.serving(service, live=True)
                if verdict.serving:
                    rt.ctx.ready[service] = c.id
                    return ok(f"{service}: lines of its cold start rotated out of its log unread (not in the log now: "
                              f"{'; '.join(gate.missing())}), and live evidence says it serves: {verdict.why}")
                if not verdict.not_serving:  # unknown: a human judges it; known not serving: the gate fails below
                    return halt(memory.rotated_text(c.status, 0, f"; live evidence: {verdict.phrase()}"))
            if now >= deadline:
                return fail(f"{service} did not finish its cold start within {int(rt.rb.timeouts.cold_start // 60)} min; missing: "
                            + "; ".join(gate.missing()))
            recent = sum(n for at, n in reads if at > now - rt.poll)
            if c is None or recent > CHATTY_LINES_PER_S * rt.poll:
                # not listed (nothing was read: a probe would always say news), or a chatty log:
                # read at the poll cadence, unprobed
                await rt.wait(max(0.0, ps_due - rt.clock.monotonic()))
                waited = "unprobed"
            else:
                waited = await rt.wait_for_output(follower, until=ps_due)

    @staticmethod
    def _start_rotated_out(rt: "Runtime", c: "Container", gate: LogGate, lines: list[str]) -> str | None:
        """A resumed gate whose engine's start rotated out of its log, for a gate that needs only
        the ready line (no per-rank milestones: those cannot be judged without the start): the
        start finished when docker says the container has run, never restarted, longer than a
        whole cold start may take and its window holds no start and no failure line but shows it
        working (health checks answered, batches run). What that evidence is, or None (the gate
        halts)."""
        g = rt.rb.log_gates
        if gate.required_per_rank or not c.is_running or not long_up(c, rt.rb.timeouts.cold_start):
            return None
        if any(bad in text for text in lines for bad in g.forbidden):
            return None
        if not past_its_start(lines):  # a start that hangs logs no request, no batch, no health check
            return None
        return (f"its start rotated out of its log (the last {len(lines)} lines hold no start and no failure line, and show it "
                f"answering health checks or serving) and docker "
                f"says it has run {c.status.removeprefix('Up ')} without a restart, longer than a whole cold start: its start "
                f"finished")

    @staticmethod
    def _failed_on_line(rt: "Runtime", node: Node, step: Step, record: list[str], why: str) -> StepOutcome:
        """FAIL, or REMEDY when the failing record (the forbidden line and the lines after it)
        carries the remedy's marker and its cap is not reached."""
        rem = step.remedy
        if rem is None:
            return fail(why)
        text = rt.rb.log_markers.get(rem.marker)
        hit = next((ln for ln in record if text and text in ln), None)
        if hit is None:
            return fail(why)
        if hit != record[0]:
            why = f"{why} | {rt.scrub(hit.strip())[:300]}"
        used = rt.ctx.remedies.get(node.id, 0)
        cap = rt.table.remedy_cap(node.id)
        if used >= cap:
            return fail(f"{why} (its remedy on {rem.marker} was already taken {used} time(s) in this run, at most {cap})")
        rt.ctx.remedies[node.id] = used + 1
        return remedy(f"{why}: taking the remedy for {rem.marker} ({used + 1} of at most {cap})")


@register
class Relay(Described):
    key = "relay"

    async def run(self, rt: "Runtime", node: Node, step: Step) -> StepOutcome:
        assert step.relay is not None
        env = await rt.ensure_env()
        client = rt.relay_client(step.relay.port, env.get(step.relay.token_variable, ""))
        deadline = rt.clock.monotonic() + rt.rb.timeouts.relay
        rt.emit("waiting", gate=f"soak relay :{step.relay.port} direct checks")
        while True:
            seen = rt.clock.monotonic()  # when this observation began: a stall after it is never read as time the condition had
            res = await client.direct_checks(rt.rb.model)
            if res.ok:
                return ok(f"relay :{step.relay.port}: /health ok, /v1/models lists {rt.rb.model}, deterministic generation non-empty")
            if seen >= deadline:
                return fail(f"relay :{step.relay.port} direct checks failed: {rt.scrub(res.reason)}")
            await rt.wait()


@register
class Verify(Described):
    key = "verify"

    async def run(self, rt: "Runtime", node: Node, step: Step) -> StepOutcome:
        assert step.verify is not None
        addr = rt.entry.model_proxy_address
        if step.verify.peers:
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
        notes = [f"both peers list {addr} healthy under the long domain only"] if step.verify.peers else []
        if step.verify.completion:
            for attempt in range(1, step.verify.attempts + 1):
                res = await rt.cache_hit_check()
                if res.ok:
                    break
                if attempt == step.verify.attempts:
                    return fail(f"completion check on {rt.entry.inference_endpoint}"
                                + (f" ({attempt} tries)" if attempt > 1 else "") + f": {rt.scrub(res.reason)}")
                await rt.wait()
            notes.append("completion and cache-hit follow-up passed" + (f" (try {attempt})" if attempt > 1 else ""))
        return ok("; ".join(notes))


@register
class Soak(Described):
    """Wait the soak out while watching every engine of every replica: a restart (new ID, a
    `restarting` state, an `Up` time that went back) or an engine gone fails the soak. The time
    already soaked is journaled, so a resume continues the soak; an approval is journaled too and
    never asked for again."""

    key = "soak"

    async def run(self, rt: "Runtime", node: Node, step: Step) -> StepOutcome:
        assert step.soak is not None
        duration = rt.soak_override if rt.soak_override is not None else step.soak.duration
        already = float(rt.ctx.soaks.get(node.id, 0.0))
        start = rt.clock.monotonic() - already
        need_approval = step.soak.approval and not rt.yes
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
            # the one serving model (orchestrator/engine/rules/serving_evidence.py): an engine known not to
            # serve fails the soak; one whose evidence does not decide (its start rotated out of
            # the log and nothing live says which engine carries the traffic) is watched, not
            # failed: failing a healthy host's soak would roll back what serves
            verdict = await rt.serving(svc)
            if verdict.not_serving:
                return fail(f"during the soak: {verdict.why}")
            if verdict.unknown:
                rt.emit("note", text=f"soak: whether {svc} serves is unknown ({verdict.why}); it is watched for a restart or exit")
        logs = ForbiddenLines(rt, list(watched)) if step.soak.watch_logs and rt.rb.log_gates.forbidden else None
        gauges = SoakGaugeWatch(rt, step.soak) if step.soak.metrics else None
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
                if step.soak.approval and rt.yes:
                    rt.approve(node.id, by="--yes")
                rt.ctx.soaks[node.id] = elapsed
                return ok(f"soaked {int(elapsed)} s" + (" and approved" if step.soak.approval else "")
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
