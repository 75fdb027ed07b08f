"""The clients' cookie jar skips answers that set no cookie (a fast path) and keeps those that do."""

from __future__ import annotations

import http.cookiejar

import httpx

from orchestrator.hosts.clients.http_session import HttpSession


class _Client(HttpSession):
    def __init__(self, transport: httpx.AsyncBaseTransport) -> None:
        self._open_session("http://cm.test", "tok", transport=transport, timeout_s=5, redactor=None)


def _transport(set_cookie: bool) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        headers = {"Set-Cookie": "session=abc; Path=/"} if set_cookie else {}
        return httpx.Response(200, json={"ok": True}, headers=headers)

    return httpx.MockTransport(handler)


async def test_an_answer_that_sets_a_cookie_still_sets_it():
    client = _Client(_transport(set_cookie=True))
    async with client:
        await client._http.get("/version")
        assert client._http.cookies.get("session") == "abc"


async def test_an_answer_without_set_cookie_never_reaches_the_jar(monkeypatch):
    calls = []
    real = http.cookiejar.CookieJar.extract_cookies
    monkeypatch.setattr(http.cookiejar.CookieJar, "extract_cookies",
                        lambda self, *a: calls.append(1) or real(self, *a))
    client = _Client(_transport(set_cookie=False))
    async with client:
        response = await client._http.get("/version")
        assert response.json() == {"ok": True} and not client._http.cookies
    assert calls == []


def test_the_lean_wire_gives_way_to_a_configured_proxy_and_to_the_escape_hatch(monkeypatch):
    """The lean transport connects directly: where an operator configured a proxy (httpx honours
    HTTP(S)_PROXY/ALL_PROXY), or asked for httpx's wire, the clients use httpx's own transport."""
    from orchestrator.hosts.clients.compose_manager import ComposeManagerClient
    from orchestrator.hosts.clients.http_session import lean_wire_allowed
    from orchestrator.hosts.clients.lean_transport import LeanTransport

    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
              "ORCHESTRATOR_HTTP_WIRE"):
        monkeypatch.delenv(k, raising=False)
    assert lean_wire_allowed()
    assert not lean_wire_allowed({"HTTPS_PROXY": "http://proxy.internal:3128"})
    assert not lean_wire_allowed({"all_proxy": "socks5://127.0.0.1:1080"})
    assert not lean_wire_allowed({"ORCHESTRATOR_HTTP_WIRE": "httpx"})

    def wire(client) -> object:
        return client._http._transport

    assert isinstance(wire(ComposeManagerClient("http://127.0.0.1:9", "t0ken")), LeanTransport)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    assert not isinstance(wire(ComposeManagerClient("http://127.0.0.1:9", "t0ken")), LeanTransport)
