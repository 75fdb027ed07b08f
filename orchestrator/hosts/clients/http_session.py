"""What every HTTP client here shares: one httpx session per client, bearer auth registered with
the redactor, a process-wide TLS context, `async with` and `aclose()`.

One TLS context serves the whole process: each `httpx.AsyncClient()` would otherwise load the CA
bundle anew (35-49 ms of blocking CPU, seven clients per run: measured in bench/,
docs/performance.md). Certificate verification stays on.
"""

from __future__ import annotations

import os
import ssl
from functools import lru_cache
from typing import Any

import httpx

from orchestrator.hosts.redaction import Redactor


@lru_cache(maxsize=1)
def shared_context() -> ssl.SSLContext:
    return ssl.create_default_context()


#: proxy variables httpx honours (trust_env) and the lean wire does not
_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def lean_wire_allowed(environ: Any = None) -> bool:
    """Whether the clients may use the lean transport (orchestrator/hosts/clients/lean_transport.py).

    httpx's own transport is used instead where the environment names a proxy (the lean wire
    connects directly, so it would bypass the proxy an operator configured), or where
    `ORCHESTRATOR_HTTP_WIRE=httpx` asks for it (an escape hatch should a host's server speak HTTP
    the lean wire does not: the same requests, ~1 ms more CPU each)."""
    env = os.environ if environ is None else environ
    if env.get("ORCHESTRATOR_HTTP_WIRE", "").strip().lower() == "httpx":
        return False
    return not any(env.get(k) for k in _PROXY_VARS)


class _Cookies(httpx.Cookies):
    """httpx's cookie jar, minus its work on answers that set no cookie.

    httpx hands every answer to `http.cookiejar` (a urllib request and response built around it,
    the headers searched): ~5 % of the executor's own CPU in a rollout, whose hosts set no cookie.
    An answer without `Set-Cookie`/`Set-Cookie2` adds nothing to the jar, so it is skipped; one
    with them takes httpx's path unchanged."""

    def extract_cookies(self, response: httpx.Response) -> None:
        headers = response.headers
        if "set-cookie" in headers or "set-cookie2" in headers:
            super().extract_cookies(response)


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
        if transport is None and lean_wire_allowed():  # production: the lean wire (lean_transport)
            from orchestrator.hosts.clients.lean_transport import LeanTransport

            transport = LeanTransport(verify=shared_context())
        self._http = httpx.AsyncClient(
            verify=shared_context(), base_url=self.base_url, transport=transport,
            timeout=httpx.Timeout(timeout_s), headers=headers,
        )
        if isinstance(getattr(self._http, "_cookies", None), httpx.Cookies):
            self._http._cookies = _Cookies(self._http._cookies)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()
