"""The clients' session on httpx's own wire: certificates verified with the one shared TLS
context, a proxy the operator configured honoured, cookies kept as httpx keeps them."""

from __future__ import annotations

import asyncio
import ssl

import httpx
import pytest
import trustme

from orchestrator.hosts.clients import http_session
from orchestrator.hosts.clients.http_session import HttpSession


def _client(base_url: str, transport: httpx.AsyncBaseTransport | None = None) -> HttpSession:
    return HttpSession(base_url, "t0ken-value", transport=transport, timeout_s=5)


class _Server:
    """A loopback HTTP/1.1 server answering every request `{"ok": true}`; keeps each request head."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self.ssl_context = ssl_context
        self.heads: list[bytes] = []

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                self.heads.append(await reader.readuntil(b"\r\n\r\n"))
                writer.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{"ok": true}')
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> int:
        self._srv = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.ssl_context)
        return self._srv.sockets[0].getsockname()[1]

    async def __aexit__(self, *exc: object) -> None:
        self._srv.close()


async def test_tls_is_verified_with_the_shared_context(monkeypatch):
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_ctx)
    async with _Server(server_ctx) as port:
        url = f"https://localhost:{port}"
        async with _client(url) as client:  # the default trust store does not know this CA
            with pytest.raises(httpx.ConnectError):
                await client._http.get("/version")
        trusting = ssl.create_default_context()
        ca.configure_trust(trusting)
        monkeypatch.setattr(http_session, "shared_context", lambda: trusting)
        async with _client(url) as client:
            assert (await client._http.get("/version")).json() == {"ok": True}


async def test_a_configured_proxy_carries_the_requests(monkeypatch):
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    proxy = _Server()
    async with proxy as port:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        async with _client("http://compose-manager.test:8000") as client:
            assert (await client._http.get("/version")).json() == {"ok": True}
    assert proxy.heads[0].startswith(b"GET http://compose-manager.test:8000/version HTTP/1.1\r\n")
    assert b"authorization: bearer t0ken-value" in proxy.heads[0].lower()


async def test_a_cookie_a_host_sets_is_sent_back():
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("cookie"))
        return httpx.Response(200, json={"ok": True}, headers={"Set-Cookie": "session=abc; Path=/"})

    async with _client("http://cm.test", httpx.MockTransport(handler)) as client:
        await client._http.get("/version")
        await client._http.get("/status")
    assert seen == [None, "session=abc"]
