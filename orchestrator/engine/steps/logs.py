"""The `logs:` step: an engine's cold start. The rules are the pure watcher's (rules/cold_start.py):
this handler polls docker/ps and the raw log, feeds the watcher, answers its questions with serving
evidence, journals the progress it hands back and acts on its verdict.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, cast

from orchestrator.engine.context import ColdStartProgress
from orchestrator.engine.rules.cold_start import ColdStartWatch, Kind, Verdict
from orchestrator.engine.steps.base import Activities, Node, Step, StepOutcome, fail, halt, ok, register, remedy
from orchestrator.engine.steps.checks import expected_rank_budget
from orchestrator.hosts.log_gate import LogGate
from orchestrator.hosts.parsers.docker_ps import by_service

if TYPE_CHECKING:
    from orchestrator.hosts.logfollow import LogFollower

#: While the probes say nothing is new, the log is still read this often (a probe does not tell
#: a line repeated verbatim apart).
FULL_READ_S = 60.0
#: A log giving more new lines per second than this is read at the poll cadence without probes
#: (a probe per few lines costs more than a poll's read).
CHATTY_LINES_PER_S = 2.0
#: A failing record shorter than this may not hold the whole traceback yet: read once more.
SHORT_RECORD = 50


@register("logs")
async def cold_start(rt: Activities, node: Node, step: Step) -> StepOutcome:
    """With a `remedy:`, a forbidden line whose record carries the remedy's marker sends REMEDY
    instead of FAIL, up to the table's cap (counted in `ctx.remedies`); any other failure fails."""
    assert step.logs is not None
    await rt.ensure_env()
    service = step.logs.service
    passed = await _no_cold_start(rt, node, service)
    if passed is not None:
        return passed
    g = rt.rb.log_gates
    expected = expected_rank_budget(rt.ctx.budget, rt.rb, service) if step.logs.budget else None
    follower = rt.raw_follower(service)
    watch = ColdStartWatch(
        service=service, startup=g.startup, window=follower.initial_tail, cold_start_s=rt.rb.timeouts.cold_start,
        gate=LogGate(rt.rb.ranks_of(step.logs), list(g.required_per_rank), list(g.required), list(g.forbidden), expected_rank_budget=expected),
        now=rt.clock.monotonic(), journaled=rt.ctx.milestones.get(service), created=rt.ctx.created,
        scrub_lines=rt.scrub_lines, may_begin_secret=rt.may_begin_secret)
    rt.emit("waiting", gate=f"{service}: " + ", ".join(watch.gate.missing()))
    hb_start = rt.start_heartbeat()
    # Between polls the log is probed (rt.wait_for_output): a new line has the log read at once;
    # while nothing is new the read is skipped, but for one every FULL_READ_S.
    c = None
    waited = "unprobed"
    reads: deque[tuple[float, int]] = deque(maxlen=64)  # (when, new lines) of the recent log reads
    ps_due = read_due = rt.clock.monotonic()
    while True:
        now = rt.clock.monotonic()  # when this observation began: a stall after it is never read as time the condition had
        if c is None or waited == "unprobed" or now >= ps_due:
            c = by_service(await rt.ps()).get(service)
            ps_due = now + rt.poll
        verdict = watch.observe(now, c)
        while True:
            if verdict.journal is not None:
                rt.ctx.milestones[service] = cast(ColdStartProgress, verdict.journal)
                rt.save_context()
            if verdict.show is not None:
                rt.tick(f"{service} cold start", hb_start, watch.deadline - hb_start, watch.progress)
                if verdict.show.line is not None:
                    rt.emit("log_line", service=service, line=verdict.show.line)
                if verdict.show.tail:  # the run page's live tail of the followed log (redacted, last lines only)
                    rt.emit("log_tail", service=service, lines=list(verdict.show.tail))
            if verdict.kind is Kind.READ:
                if waited == "quiet" and now < read_due:
                    verdict = watch.window([])
                else:
                    batch = await follower.poll()
                    read_due = now + FULL_READ_S
                    reads.append((now, len(batch.new)))
                    verdict = watch.window([ln.text for ln in batch.new], batch.gap)
            elif verdict.kind is Kind.ASK:
                verdict = watch.evidence(await rt.serving(service, live=verdict.live))
            else:
                break
        if verdict.kind is Kind.PASS:
            if verdict.ready is not None:
                rt.ctx.ready[service] = verdict.ready
            return ok(verdict.why)
        if verdict.kind is Kind.HALT:
            return halt(verdict.why)
        if verdict.kind is Kind.FAIL:
            if verdict.line is None:
                return fail(verdict.why)
            return await _failed_on_line(rt, node, step, follower, verdict)
        recent = sum(n for at, n in reads if at > now - rt.poll)
        if c is None or recent > CHATTY_LINES_PER_S * rt.poll:
            # not listed (nothing was read: a probe would always say news), or a chatty log:
            # read at the poll cadence, unprobed
            await rt.wait(max(0.0, ps_due - rt.clock.monotonic()))
            waited = "unprobed"
        else:
            waited = await rt.wait_for_output(follower, until=ps_due)


async def _no_cold_start(rt: Activities, node: Node, service: str) -> StepOutcome | None:
    """OK when there is no cold start to watch: the dry run left the engine unchanged and it serves,
    or its cold start passed in this run (same container) and it still serves (a remedy waiting for
    its sibling must not halt because the sibling's start scrolled out meanwhile)."""
    actions: dict[str, str] = {}
    for sid in reversed(rt.table.phase_dry_runs(node.phase)):
        plan = rt.ctx.plans.get(sid)
        acts = plan.get("actions", {}) if plan else {}
        if service in acts:
            actions = acts
            break
    if actions.get(service) == "unchanged":
        verdict = await rt.serving(service)
        if verdict.serving:
            return ok(f"{service} was already serving on this definition: no cold start")
    ready_id = rt.ctx.ready.get(service)
    if ready_id is not None:
        # never judged again from a start that may have scrolled out of the log window since
        now = by_service(await rt.ps()).get(service)
        if now is not None and now.id == ready_id:
            verdict = await rt.serving(service)
            if verdict.serving:
                return ok(f"{service} passed its cold start in this run (same container) and still serves")
    return None


async def _failed_on_line(rt: Activities, node: Node, step: Step, follower: LogFollower, verdict: Verdict) -> StepOutcome:
    """FAIL, or REMEDY when the failing record carries the remedy's marker under its cap. SGLang logs
    a start-up failure as one traceback whose first line is forbidden and whose last names the
    cause (`DistStoreError`): the marker is looked for in it all."""
    why = verdict.why
    rem = step.remedy
    if rem is None:
        return fail(why)
    record = list(verdict.record)
    if len(record) < SHORT_RECORD:
        await rt.wait()  # the rest of the traceback may not be in this read yet
        record += [x.text for x in (await follower.poll()).new][:200]
    text = rt.rb.log_markers.get(rem.marker)
    hit = next((i for i, ln in enumerate(record) if text and text in ln), None)
    if hit is None:
        return fail(why)
    if hit:  # quoted from the record scrubbed whole (a secret split across two lines is hidden whole)
        why = f"{why} | {rt.scrub_lines(record[:hit + 2])[hit].strip()[:300]}"
    used = rt.ctx.remedies.get(node.id, 0)
    cap = rt.table.remedy_cap(node.id)
    if used >= cap:
        return fail(f"{why} (its remedy on {rem.marker} was already taken {used} time(s) in this run, at most {cap})")
    rt.ctx.remedies[node.id] = used + 1
    return remedy(f"{why}: taking the remedy for {rem.marker} ({used + 1} of at most {cap})")
