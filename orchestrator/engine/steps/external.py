"""Gates on what the engines do not say themselves: the host's proxy pool, the tag's PR and CI, a
read-only HTTP/JSON answer, the attestation report, the running image. Every read is a GET; a
source that cannot be read fails the gate (polled first with `within`), never a pass.
- `proxy_pool:` a backend belongs to a replica when its address's host is one of its engines;
- `pull_request:` green means every check run of the PR's head completed with success, neutral or
  skipped, at least one ran, and every `required` name is among them;
- `attestation:` ASSUMED (the simulator's 8e07c35 model): actions_hash is the sha256 of the actions
  as compact JSON and report_data opens with it; the quote's signature is DCAP's job, not ours.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from orchestrator.engine.steps.base import Activities, Node, Step, StepOutcome, error_text, fail, ok, register
from orchestrator.engine.steps.env import placeholder_values, poll
from orchestrator.hosts.parsers.action_log import last_deploy, parse_action_log
from orchestrator.language import gate_specs
from orchestrator.language.gate_specs import fill, json_at

GREEN = frozenset({"success", "neutral", "skipped"})


def _clip(value: Any, n: int = 160) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= n else text[:n] + "..."


def matches(value: Any, equals: Any = None, contains: str | None = None) -> bool:
    """`equals`: the same JSON value (a string compares with a number or boolean as its JSON text);
    `contains`: an element of a list, a key of an object, a substring."""
    if contains is None:
        if isinstance(equals, str) and not isinstance(value, str):
            return value is not None and json.dumps(value) == equals
        if isinstance(value, bool) or isinstance(equals, bool):
            return value is equals
        return bool(value == equals)
    if isinstance(value, list):
        return any(x == contains or (not isinstance(x, str) and str(x) == contains) for x in value)
    if isinstance(value, dict):
        return contains in value
    return isinstance(value, str) and contains in value


def judge_pull_request(status: Any, merged: bool, green: bool, required: list[str]) -> list[str]:
    if status.number is None:
        return [f"commit {status.commit[:12]} belongs to no pull request (pushed to main directly?)"]
    problems = []
    if merged and not status.merged:
        problems.append(f"PR #{status.number} is not merged")
    if green:
        if not status.checks:
            problems.append(f"no CI check ran on PR #{status.number}'s head {str(status.head)[:12]}")
        for name, (state, conclusion) in sorted(status.checks.items()):
            if state != "completed":
                problems.append(f"check {name} is {state}")
            elif conclusion not in GREEN:
                problems.append(f"check {name} concluded {conclusion}")
        problems += [f"required check {n} did not run" for n in required if n not in status.checks]
    return problems


@register("proxy_pool")
async def proxy_pool(rt: Activities, node: Node, step: Step) -> StepOutcome:
    p = step.spec(gate_specs.ProxyPoolSpec)
    listed: list[str] = []

    async def check() -> list[str]:
        env = await rt.ensure_env()
        backends = await rt.proxy_backends(p.port, env.get(p.token_variable, ""))
        listed[:] = [f"{b.address}{'' if b.healthy else ' (unhealthy)'}" for b in backends]
        problems = []
        for r in p.contains:
            engines = set(rt.rb.replicas.get(r, []))
            if not any(b.host in engines and b.healthy for b in backends):
                problems.append(f"does not list {r} ({', '.join(sorted(engines))}) healthy")
        for r in p.lacks:
            engines = set(rt.rb.replicas.get(r, []))
            hit = [b.address for b in backends if b.host in engines]
            if hit:
                problems.append(f"still lists {r} ({', '.join(hit)})")
        return problems

    problems = await poll(rt, p.within, check, p.text())
    pool = f"pool: {', '.join(listed) or 'empty'}"
    if problems:
        return fail(f"the host's proxy (:{p.port}) " + "; ".join(problems) + f" ({pool})")
    return ok(f"the host's proxy (:{p.port}) " + " and ".join(
        [f"lists {r}" for r in p.contains] + [f"does not list {r}" for r in p.lacks]) + f" ({pool})")


@register("pull_request")
async def pull_request(rt: Activities, node: Node, step: Step) -> StepOutcome:
    spec = step.spec(gate_specs.PullRequestSpec)
    repo, tag = rt.github_repo(), rt.run.tag or ""
    if repo is None:
        return fail(f"the inventory names no github_repo for {rt.run.host}: tag {tag}'s PR and CI cannot be checked")
    try:
        status = await rt.pull_request(repo, tag)
    except Exception as exc:  # GitHubUnreachable and the client's errors, named
        return fail(f"GitHub could not say whether tag {tag}'s PR is merged and green: {rt.scrub(error_text(exc))}")
    if status is None:
        return fail(f"tag {tag} does not exist in {repo}")
    problems = judge_pull_request(status, spec.merged, spec.checks == "green", spec.required)
    if problems:
        return fail(f"tag {tag} ({status.commit[:12]}) in {repo}: " + "; ".join(problems))
    return ok(f"tag {tag}: PR #{status.number} merged" + (f", {len(status.checks)} CI checks green ("
                                                       f"{', '.join(sorted(status.checks))})" if spec.checks == "green" else ""))


@register("http_json")
async def http_json(rt: Activities, node: Node, step: Step) -> StepOutcome:
    spec = step.spec(gate_specs.HttpJsonSpec)
    texts = [spec.url] + [v for v in (spec.equals, spec.contains) if isinstance(v, str)]
    seen: list[str] = []
    known: dict[str, str] = {}

    async def check() -> list[str]:
        values = known or await placeholder_values(rt, *texts)  # read once (GitHub for {file_sha256})
        known.update(values)
        url = fill(spec.url, values)
        token = None
        if spec.token_variable:
            token = (await rt.ensure_env()).get(spec.token_variable) or None
        payload = await rt.http_json(url, token)
        try:
            value = json_at(payload, spec.path)
        except KeyError as exc:
            return [f"GET {url}: no {exc.args[0]!r} on the way to {spec.path}"]
        seen[:] = [_clip(value)]
        equals = fill(spec.equals, values) if isinstance(spec.equals, str) else spec.equals
        contains = fill(spec.contains, values) if spec.contains is not None else None
        if not matches(value, equals, contains):
            want = f"equal {_clip(equals)}" if contains is None else f"contain {contains!r}"
            return [f"GET {url}: {spec.path} is {_clip(value)}, which does not {want}"]
        return []

    problems = await poll(rt, spec.within, check, spec.text())
    if problems:
        return fail(rt.scrub("; ".join(problems)))
    return ok(rt.scrub(f"{spec.path} holds ({seen[0] if seen else ''})"))


@register("attestation")
async def attestation(rt: Activities, node: Node, step: Step) -> StepOutcome:
    spec = step.spec(gate_specs.AttestationSpec)
    try:
        report = await rt.attestation_report()  # a fresh nonce, checked echoed
    except Exception as exc:  # the client's errors, named
        return fail(f"attestation report could not be read: {rt.scrub(error_text(exc))}")
    problems = bound_report(report)
    try:
        actions = parse_action_log(report)
    except Exception as exc:  # ParseError
        return fail(f"attestation report's actions do not parse: {exc}")
    repo = rt.github_repo()
    sha_cache: dict[tuple[str, str], str | None] = {}
    lines = []
    for svc in spec.services:
        want = rt.ctx.deployed.get(svc) or {"tag": rt.run.tag or "", "file": rt.rb.file}
        got = last_deploy(actions, svc)
        if got is None:
            problems.append(f"no compose_up of {svc} is attested")
            continue
        if (got.tag, got.file) != (want["tag"], want["file"]):
            problems.append(f"{svc}: attested {got.file}@{got.tag}, deployed {want['file']}@{want['tag']}")
            continue
        key = (want["file"], want["tag"])
        if key not in sha_cache:
            if repo is None:
                return fail("the attested file hash cannot be checked: the inventory names no github_repo for "
                            f"{rt.run.host}")
            try:
                sha_cache[key] = await rt.file_sha256(repo, *key)
            except Exception as exc:  # GitHub's errors, named
                return fail(f"{key[0]}@{key[1]} could not be read from GitHub to check its hash: {rt.scrub(error_text(exc))}")
        expected = sha_cache[key]
        if expected is None:
            problems.append(f"{key[0]} is not in {repo} at {key[1]}")
        elif got.file_sha256 != expected:
            problems.append(f"{svc}: attested file_sha256 {str(got.file_sha256)[:12]} is not that of {key[0]}@{key[1]} "
                            f"({expected[:12]})")
        else:
            lines.append(f"{svc} <- {key[0]}@{key[1]} (sha256 {expected[:12]})")
    if problems:
        return fail("attestation: " + "; ".join(problems))
    return ok("attested: " + "; ".join(lines))


def bound_report(report: dict[str, Any]) -> list[str]:
    actions = report.get("actions")
    if not isinstance(actions, list):
        return ["the report has no actions list"]
    digest = hashlib.sha256(json.dumps(actions, separators=(",", ":")).encode()).hexdigest()
    problems = []
    if report.get("actions_hash") != digest:
        problems.append("actions_hash is not the sha256 of the reported actions (a log rewritten or stale)")
    data = str(report.get("report_data") or "")
    if not data.startswith(str(report.get("actions_hash"))):
        problems.append("report_data does not open with actions_hash (the quote does not bind this log)")
    elif data not in str(report.get("quote") or ""):
        problems.append("the quote does not carry report_data")
    return problems


@register("image")
async def image(rt: Activities, node: Node, step: Step) -> StepOutcome:
    spec = step.spec(gate_specs.ImageSpec)
    want = (spec.digest or rt.rb.replica_values.get(spec.replica or "", {}).get("engine_image", "")).removeprefix("sha256:")
    running = [c for c in await rt.ps() if (c.service or c.name) == spec.service]
    if not running:
        return fail(f"{spec.service} is not running (docker/ps): its image cannot be checked")
    _, at, got = (running[0].image or "").partition("@sha256:")  # `repo@sha256:<hex>`, or a tag only
    if not (at and got):
        return fail(f"{spec.service} runs {running[0].image!r}, named by a tag, not pinned by a digest")
    got = got.lower()
    if not got.startswith(want.lower()):
        return fail(f"{spec.service} runs sha256:{got[:12]}, not the pinned sha256:{want[:12]}")
    return ok(f"{spec.service} runs sha256:{got[:12]} as pinned")
