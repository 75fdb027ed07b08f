"""`env:` and `manual:` (issue 23): the env map as a gate, and a human's edit verified.

Rules:
- `env:` reads the env map afresh from the dashboard (this host's, or another inventory host's by
  its instance name) and judges it: `absent` keys must not be set, `equals` keys must hold the
  runbook's value. A value is never shown (a mismatch says "differs"); this host's fresh map is
  also the one the next compose call passes whole. With `within`, polled until it holds;
- `manual:` names the edit a human must make and waits for the approval of its own state
  (`orchestrate approve RUN_ID --gate <state>`, or `*`; `--yes` on the command that runs the run
  approves it, journaled as by `--yes`), then verifies the edit with its `env:` check: an edit
  approved but not made fails the step (the phase's rollback), it is never taken on trust;
- a rollback that holds a manual step is announced when the rollback starts (executor/loop.py,
  `manual_edits_ahead`) and listed by `plan` before the steps.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from orchestrator.util.durations import format_duration
from orchestrator.language.gate_specs import EnvSpec, fill, needs_file_sha
from orchestrator.language.machine import Event, Node
from orchestrator.language.runbook import Step
from orchestrator.engine.steps.base import Described, StepOutcome, fail, ok, register
from orchestrator.engine.steps.evidence import error_text

if TYPE_CHECKING:
    from orchestrator.engine.steps.activities import Activities


def judge_env(env: Any, spec: EnvSpec, values: dict[str, str]) -> list[str]:
    """What is wrong with `env` (a mapping) under `spec`; values never appear in the text."""
    problems = [f"{k} is set (value not shown): it must be absent" for k in spec.absent if k in env]
    for k, want in spec.equals.items():
        if k not in env:
            problems.append(f"{k} is not set: it must equal the runbook's value")
        elif env[k] != fill(want, values):
            problems.append(f"{k} differs from the runbook's value (values are not shown)")
    return problems


async def placeholder_values(rt: "Activities", *texts: str) -> dict[str, str]:
    """{host}, {tag}, {file}, {run_id}; {file_sha256} only when a text names it (a GitHub read)."""
    values = {"host": rt.run.host, "tag": rt.run.tag or "", "file": rt.rb.file, "run_id": rt.run.run_id}
    if needs_file_sha(*texts):
        repo = rt.github_repo()
        if repo is None:
            raise LookupError("{file_sha256} needs the inventory's github_repo for this host")
        sha = await rt.file_sha256(repo, rt.rb.file, rt.run.tag or "")
        if sha is None:
            raise LookupError(f"{rt.rb.file} is not in {repo} at tag {rt.run.tag}")
        values["file_sha256"] = sha
    return values


async def poll(rt: "Activities", within: float, check: Callable[[], Awaitable[list[str]]]) -> list[str]:
    """`check()` until it finds no problem or `within` has run out (once when 0); the last problems."""
    deadline = rt.clock.monotonic() + within
    while True:
        seen = rt.clock.monotonic()
        try:
            problems = await check()
        except Exception as exc:  # noqa: BLE001 - the clients' errors and a missing host, named, retried
            problems = [rt.scrub(error_text(exc))]
        if not problems or seen >= deadline:
            return problems
        await rt.wait()


async def env_of(rt: "Activities", host: str) -> Any:
    if host == "this":
        return await rt.read_env()  # afresh: a human's edit must show, and the next call passes it
    return await rt.other_env(host)


async def env_gate(rt: "Activities", spec: EnvSpec) -> StepOutcome:
    who = rt.run.host if spec.host == "this" else spec.host
    values: dict[str, str] = {}

    async def check() -> list[str]:
        nonlocal values
        if not values:
            values = await placeholder_values(rt, *spec.equals.values())
        return judge_env(await env_of(rt, spec.host), spec, values)

    if spec.within:
        rt.emit("waiting", gate=spec.text())
    problems = await poll(rt, spec.within, check)
    if problems:
        return fail(f"{who}'s env map: " + "; ".join(problems)
                    + (f" (after {format_duration(spec.within)})" if spec.within else ""))
    held = [f"{k} absent" for k in spec.absent] + [f"{k} as the runbook says" for k in spec.equals]
    return ok(f"{who}'s env map: {', '.join(held)}")


@register
class EnvGate(Described):
    key = "env"

    async def run(self, rt: "Activities", node: Node, step: Step) -> StepOutcome:
        assert step.env is not None
        return await env_gate(rt, step.env)


@register
class Manual(Described):
    key = "manual"

    async def run(self, rt: "Activities", node: Node, step: Step) -> StepOutcome:
        m = step.manual
        assert m is not None
        edit = fill(m.edit, await placeholder_values(rt, m.edit))  # the instruction as the human must carry it out
        announced = False
        start = rt.start_heartbeat()
        while not ({node.id, "*"} & rt.approvals()):
            if rt.yes:
                rt.approve(node.id, by="--yes")
                break
            if not announced:
                rt.emit("waiting", gate=f"MANUAL EDIT: {edit}; once made, `orchestrate approve {rt.run.run_id} --gate "
                                        f"{node.id}` (then it is verified: {m.verify.env.text()})")
                rt.log.warning("manual_edit_awaited", state=node.id, edit=edit)
                announced = True
            rt.tick(f"manual edit at {node.id}", start, None, lambda: {"awaiting": "approval", "edit": edit})
            await rt.wait()
        verdict = await env_gate(rt, m.verify.env)
        if verdict.event.value != "ok":
            return fail(f"the manual edit was approved but does not hold: {verdict.note} (edit: {edit})")
        return ok(f"manual edit made and verified: {verdict.note}")


def manual_edits(steps: list[Step]) -> list[str]:
    """The manual edits a list of steps will ask a human for, in order."""
    return [f"{st.id}: {st.manual.edit}" for st in steps if st.manual is not None]


def manual_edits_ahead(table: Any, start: str) -> list[str]:
    """The manual edits the rollback entered at `start` will ask for (its OK path, while it stays in
    a rollback section): said when the rollback starts, before anything of it runs."""
    out: list[str] = []
    cur, seen = start, set()
    while cur in table.nodes and cur not in seen:
        node = table.nodes[cur]
        if node.section not in ("rollback", "full_rollback"):
            break
        seen.add(cur)
        if node.step is not None and node.step.manual is not None:
            out.append(f"{cur}: {node.step.manual.edit}")
        nxt = table.edges.get((cur, Event.OK))
        if nxt is None:
            break
        cur = nxt
    return out
