"""What every HTTP client here shares: one httpx session, bearer auth registered with the
redactor, the request mapped to the error taxonomy, the retried JSON read, `aclose()`.

The wire is httpx's own `AsyncHTTPTransport` (what respx mocks, what honours `HTTP(S)_PROXY` /
`NO_PROXY`); only tests pass a `transport`. One TLS context serves the process: each client would
otherwise load the CA bundle anew (35-49 ms of blocking CPU). Verification stays on.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import httpx

from orchestrator.hosts.clients.errors import RequestInvalid, error_for_status, parse_json, transport_error
from orchestrator.hosts.clients.retry import RetryPolicy, call_with_retry
from orchestrator.hosts.redaction import Redactor, reveal
from orchestrator.util.clock import Clock, RealClock


@lru_cache(maxsize=1)
def shared_context() -> ssl.SSLContext:
    return ssl.create_default_context()


class HttpSession:
    """A subclass names its `system` (in every error), its default `timeout_s`, and `empty_token`:
    the refusal of an empty token where the system requires one (None: the token is optional)."""

    system = "http"
    timeout_s: float = 30
    empty_token: str | None = None

    def __init__(self, base_url: str, token: Any = None, *, transport: httpx.AsyncBaseTransport | None = None,
                 retry: RetryPolicy | None = None, timeout_s: float | None = None, redactor: Redactor | None = None,
                 clock: Clock | None = None) -> None:
        secret = reveal(token)
        if not secret and self.empty_token:
            raise RequestInvalid(self.system, f"token: {self.empty_token}", field="token")
        self.base_url = base_url.rstrip("/")
        self.redactor = redactor if redactor is not None else Redactor()
        self.retry = retry or RetryPolicy()
        self._clock = clock or RealClock()
        if timeout_s is not None:
            self.timeout_s = timeout_s
        headers = {}
        if secret:
            self.redactor.add(secret)
            headers["Authorization"] = f"Bearer {secret}"
        self._http = httpx.AsyncClient(
            verify=shared_context(), base_url=self.base_url, transport=transport,
            timeout=httpx.Timeout(self.timeout_s), headers=headers,
        )

    async def request(self, method: str, path: str, *, json_body: Any = None, params: dict[str, str] | None = None,
                      headers: dict[str, str] | None = None, stream: bool = False, timeout: httpx.Timeout | None = None,
                      any_status: bool = False) -> httpx.Response:
        """One request: its 2xx answer (`any_status`: any answer), else the taxonomy's error (a
        transport failure's too). `stream`: the body is left unread (read and closed here on a refusal)."""
        try:
            request = self._http.build_request(method, path, json=json_body, params=params, headers=headers,
                                               timeout=timeout or httpx.USE_CLIENT_DEFAULT)
            response = await self._http.send(request, stream=stream)
        except httpx.HTTPError as exc:
            raise transport_error(self.system, exc, self.redactor) from None
        if not response.is_success and not any_status:
            if stream:
                try:
                    await response.aread()
                except httpx.HTTPError:
                    pass
                finally:
                    await response.aclose()
            raise error_for_status(self.system, response, self.redactor)
        return response

    async def _read_json(self, method: str, path: str, *, what: str | None = None, json_body: Any = None,
                         params: dict[str, str] | None = None, check: Callable[[Any], Any] | None = None) -> Any:
        """A read retried by `self.retry`: the JSON of a 2xx answer passed through `check` (whose
        errors are retried too). `what` names the call in log events."""
        async def attempt() -> Any:
            response = await self.request(method, path, json_body=json_body, params=params)
            payload = parse_json(self.system, response)
            return check(payload) if check is not None else payload

        return await call_with_retry(attempt, self.retry, mutating=False, what=what or f"{self.system} {path}",
                                     clock=self._clock)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()
