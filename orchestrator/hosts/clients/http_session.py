"""What every HTTP client here shares: one httpx session per client, bearer auth registered with
the redactor, a process-wide TLS context, `async with` and `aclose()`.

The wire is httpx's own (`AsyncHTTPTransport`, built by `httpx.AsyncClient`): the one respx mocks
in the tests, and the one that honours `HTTP_PROXY`/`HTTPS_PROXY`/`ALL_PROXY`/`NO_PROXY`. A test
may pass its own `transport`; production passes none. Cookies are httpx's: a host's `Set-Cookie`
is kept for that client's session (no host here sets one; nothing depends on them).

One TLS context serves the whole process: each `httpx.AsyncClient()` would otherwise load the CA
bundle anew (35-49 ms of blocking CPU, seven clients per run). Certificate verification stays on.
"""

from __future__ import annotations

import ssl
from functools import lru_cache
from typing import Any

import httpx

from orchestrator.hosts.redaction import Redactor


@lru_cache(maxsize=1)
def shared_context() -> ssl.SSLContext:
    return ssl.create_default_context()


class HttpSession:
    """Base of the clients: `self._http`, `self.base_url`, `self.redactor` (holding the token)."""

    def _open_session(
        self,
        base_url: str,
        secret: str | None,
        *,
        transport: httpx.AsyncBaseTransport | None,
        timeout_s: float,
        redactor: Redactor | None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.redactor = redactor if redactor is not None else Redactor()
        headers = {}
        if secret:
            self.redactor.add(secret)
            headers["Authorization"] = f"Bearer {secret}"
        self._http = httpx.AsyncClient(
            verify=shared_context(), base_url=self.base_url, transport=transport,
            timeout=httpx.Timeout(timeout_s), headers=headers,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()
