"""What every HTTP client here shares: one httpx session per client, bearer auth registered with
the redactor, a process-wide TLS context, the retried JSON read, `async with` and `aclose()`.

The wire is httpx's own (`AsyncHTTPTransport`, built by `httpx.AsyncClient`): the one respx mocks
in the tests, and the one that honours `HTTP_PROXY`/`HTTPS_PROXY`/`ALL_PROXY`/`NO_PROXY`. A test
may pass its own `transport`; production passes none. Cookies are httpx's: a host's `Set-Cookie`
is kept for that client's session (no host here sets one; nothing depends on them).

One TLS context serves the whole process: each `httpx.AsyncClient()` would otherwise load the CA
bundle anew (35-49 ms of blocking CPU, seven clients per run). Certificate verification stays on.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import httpx

from orchestrator.hosts.clients.errors import error_for_status, parse_json, transport_error
from orchestrator.hosts.clients.retry import RetryPolicy, call_with_retry
from orchestrator.hosts.redaction import Redactor
from orchestrator.util.clock import Clock, RealClock


@lru_cache(maxsize=1)
def shared_context() -> ssl.SSLContext:
    return ssl.create_default_context()


class HttpSession:
    """Base of the clients: `self._http`, `self.base_url`, `self.redactor` (holding the token),
    `self.retry` and `self._clock` (what a read's retries wait on)."""

    def _open_session(
        self,
        base_url: str,
        secret: str | None,
        *,
        transport: httpx.AsyncBaseTransport | None,
        timeout_s: float,
        redactor: Redactor | None,
        retry: RetryPolicy | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.redactor = redactor if redactor is not None else Redactor()
        self.retry = retry or RetryPolicy()
        self._clock = clock or RealClock()
        headers = {}
        if secret:
            self.redactor.add(secret)
            headers["Authorization"] = f"Bearer {secret}"
        self._http = httpx.AsyncClient(
            verify=shared_context(), base_url=self.base_url, transport=transport,
            timeout=httpx.Timeout(timeout_s), headers=headers,
        )

    async def _read_json(self, system: str, method: str, path: str, *, what: str, json_body: Any = None,
                         params: dict[str, str] | None = None, check: Callable[[Any], Any] | None = None) -> Any:
        """A read, retried by `self.retry`: the JSON body of a 2xx answer (passed through `check`,
        whose errors are retried like the status's), else the error taxonomy's error."""
        async def attempt() -> Any:
            try:
                response = await self._http.request(method, path, json=json_body, params=params)
            except httpx.HTTPError as exc:
                raise transport_error(system, exc, self.redactor) from None
            if not response.is_success:
                raise error_for_status(system, response, self.redactor)
            payload = parse_json(system, response, self.redactor)
            return check(payload) if check is not None else payload

        return await call_with_retry(attempt, self.retry, mutating=False, what=what, clock=self._clock)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()
