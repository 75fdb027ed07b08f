"""`env:` the env map (this host's or another's, read afresh) as a gate: `absent` keys unset, `equals`
keys at the runbook's value; a value is never shown. Also the placeholders and polling the other
gates share.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from orchestrator.engine.steps.base import Activities, Node, Step, StepOutcome, error_text, fail, ok, register
from orchestrator.language.gate_specs import EnvSpec, fill, needs_file_sha
from orchestrator.util.durations import format_duration


def judge_env(env: Any, spec: EnvSpec, values: dict[str, str]) -> list[str]:
    """What is wrong with `env` (a mapping) under `spec`; values never appear in the text."""
    problems = [f"{k} is set (value not shown): it must be absent" for k in spec.absent if k in env]
    for k, want in spec.equals.items():
        if k not in env:
            problems.append(f"{k} is not set: it must equal the runbook's value")
        elif env[k] != fill(want, values):
            problems.append(f"{k} differs from the runbook's value (values are not shown)")
    return problems


async def placeholder_values(rt: Activities, *texts: str) -> dict[str, str]:
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


async def poll(rt: Activities, within: float, check: Callable[[], Awaitable[list[str]]], gate: str = "") -> list[str]:
    """`check()` until it finds no problem or `within` has run out (once when 0); the last problems.
    `gate`: what a poll with a `within` says it waits for."""
    if within and gate:
        rt.emit("waiting", gate=gate)
    deadline = rt.clock.monotonic() + within
    while True:
        seen = rt.clock.monotonic()  # when this observation began: a stall after it is never read as time the condition had
        try:
            problems = await check()
        except Exception as exc:  # the clients' errors and a missing host, named, retried
            problems = [rt.scrub(error_text(exc))]
        if not problems or seen >= deadline:
            return problems
        await rt.wait()


async def env_gate(rt: Activities, spec: EnvSpec) -> StepOutcome:
    who = rt.run.host if spec.host == "this" else spec.host
    values: dict[str, str] = {}

    async def check() -> list[str]:
        nonlocal values
        if not values:
            values = await placeholder_values(rt, *spec.equals.values())
        env = await rt.read_env() if spec.host == "this" else await rt.other_env(spec.host)
        return judge_env(env, spec, values)

    problems = await poll(rt, spec.within, check, spec.text())
    if problems:
        return fail(f"{who}'s env map: " + "; ".join(problems)
                    + (f" (after {format_duration(spec.within)})" if spec.within else ""))
    held = [f"{k} absent" for k in spec.absent] + [f"{k} as the runbook says" for k in spec.equals]
    return ok(f"{who}'s env map: {', '.join(held)}")


@register("env")
async def env_step(rt: Activities, node: Node, step: Step) -> StepOutcome:
    return await env_gate(rt, step.spec(EnvSpec))
