"""The executor's own work as it was before the P1 cuts (issue 25, branch perf-p1), patched back in
this process for a side-by-side run. Nothing here changes a file; for the duration of the block:

- `RunContext.to_json` is `dataclasses.asdict`'s walk (deepcopy of every leaf), not the JSON round trip;
- docker/ps output is parsed line by line every time (no cache of lines already parsed);
- the clients use httpx's own transport (httpcore, h11, anyio), not `LeanTransport`;
- httpx's cookie jar looks at every answer;
- every call goes through tenacity from its first attempt.

Used by bench/p1_overhead.py (`before=True`, together with `before_issue_25`) and bench/p5_fleet.py.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any


def _parse_docker_ps_uncached(output: str) -> list[Any]:
    from orchestrator.hosts.parsers import ParseError
    from orchestrator.hosts.parsers.docker_ps import container_from_json

    containers = []
    for line_no, line in enumerate(output.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise ParseError("not JSON", line_no=line_no) from None
        for item in obj if isinstance(obj, list) else [obj]:
            containers.append(container_from_json(item, line_no=line_no))
    return containers


def _retry_without_fast_path() -> Any:
    """`call_with_retry` as it was: tenacity from the first attempt (its retry log left out)."""
    from tenacity import AsyncRetrying

    from orchestrator.hosts.clients import retry as retry_mod

    async def call_with_retry(fn: Any, policy: Any, *, mutating: bool, what: str, clock: Any = None) -> Any:
        from orchestrator.util.clock import RealClock

        clock = clock or RealClock()
        budget = retry_mod._Budget(policy=policy, started=clock.monotonic())

        def should_retry(state: Any) -> bool:
            exc = state.outcome.exception() if state.outcome else None
            if exc is None:
                return False
            budget.last_busy = budget.last_tag_not_found = False
            if isinstance(exc, retry_mod.Busy):
                budget.busy += 1
                budget.last_busy = True
                return True
            if isinstance(exc, retry_mod.TagNotFound):
                budget.tag_not_found += 1
                budget.last_tag_not_found = True
                return True
            if retry_mod.is_transient(exc, mutating=mutating):
                budget.transient += 1
                return True
            return False

        def wait(_state: Any) -> float:
            if budget.last_busy:
                return policy.busy_wait_s
            if budget.last_tag_not_found:
                return policy.tag_not_found_wait_s * (2 ** max(0, budget.tag_not_found - 1))
            return policy.backoff(budget.transient)

        def stop(state: Any) -> bool:
            if budget.last_busy:
                return budget.busy > policy.busy_retries
            if budget.last_tag_not_found:
                return budget.tag_not_found > policy.tag_not_found_retries
            if budget.transient >= policy.max_attempts:
                return True
            return clock.monotonic() - budget.started + (state.upcoming_sleep or 0.0) > policy.deadline_s

        return await AsyncRetrying(sleep=clock.sleep, retry=should_retry, wait=wait, stop=stop, reraise=True)(fn)

    return call_with_retry


@contextlib.contextmanager
def before_p1_cuts(enabled: bool = True) -> Iterator[None]:
    if not enabled:
        yield
        return
    import httpx

    from orchestrator.hosts.clients import compose_manager, dashboard, github, http_session, lean_transport, model_proxy
    from orchestrator.engine.context import RunContext

    saved: list[tuple[Any, str, Any]] = []

    def patch(obj: Any, name: str, value: Any) -> None:
        saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    patch(RunContext, "to_json", RunContext._to_json_walk)
    patch(compose_manager, "parse_docker_ps", _parse_docker_ps_uncached)
    patch(lean_transport, "LeanTransport", lambda verify=None: httpx.AsyncHTTPTransport(verify=verify))
    patch(http_session._Cookies, "extract_cookies", httpx.Cookies.extract_cookies)
    old_retry = _retry_without_fast_path()
    for mod in (compose_manager, dashboard, github, model_proxy):
        patch(mod, "call_with_retry", old_retry)
    try:
        yield
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)
