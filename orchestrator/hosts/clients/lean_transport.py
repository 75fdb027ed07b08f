"""A lean HTTP/1.1 transport for httpx on asyncio streams: the clients' requests without httpcore.

Why: httpx's default transport (httpcore, h11, anyio) spends ~1.6 ms of CPU per request on this
machine, where a request over a plain asyncio stream costs ~0.3 ms and httpx's client layer
~0.2 ms (bench/, docs/performance.md): a rollout sends a few hundred requests per replica, and the
orchestrator's own CPU per replica was mostly this. httpx's client stays (URLs, headers, auth,
`Response`, the clients' error mapping); only the wire is ours.

What it does, as httpcore does it for these clients:
- HTTP/1.1, one request at a time per connection; idle connections are kept per origin for
  `keepalive_expiry` seconds (httpx's 5 s) and dropped when the peer closed them meanwhile;
- TLS with the given context (`server_hostname` = the URL's host);
- bodies framed by Content-Length, chunked transfer coding, or the connection's end; HEAD, 1xx,
  204 and 304 carry none; a response body read to its end returns the connection to the pool,
  one closed early (or any error, or a cancellation) closes it;
- httpx's exception types: `ConnectError`/`ConnectTimeout` (nothing sent), `WriteError`/
  `WriteTimeout`, `ReadError`/`ReadTimeout`, `RemoteProtocolError` (the peer closed before or
  inside a response), `LocalProtocolError` (a header with CR/LF), `UnsupportedProtocol`.

It knows nothing of test doubles: a test that mocks with respx (which patches httpcore) asks for
httpx's own transport the way an operator can, `ORCHESTRATOR_HTTP_WIRE=httpx` (tests/conftest.py
`httpx_wire`).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator

import httpx

_NO_BODY_STATUS = frozenset({204, 304})
_READ = 65536


class _Conn:
    __slots__ = ("reader", "writer", "idle_since")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def usable(self, now: float, expiry: float) -> bool:
        return (now - self.idle_since < expiry and not self.writer.is_closing()
                and not self.reader.at_eof() and not self.reader._buffer)  # type: ignore[attr-defined]

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001 - closing a broken socket
            pass


async def _within(timeout: float | None, aw, on_timeout: type[httpx.TimeoutException], request: httpx.Request):
    if timeout is None:
        return await aw
    try:
        async with asyncio.timeout(timeout):
            return await aw
    except TimeoutError:
        raise on_timeout(f"timed out after {timeout} s", request=request) from None


class LeanTransport(httpx.AsyncBaseTransport):
    def __init__(self, *, verify: ssl.SSLContext | None = None, keepalive_expiry: float = 5.0,
                 max_idle_per_origin: int = 20) -> None:
        self._ssl = verify
        self._expiry = keepalive_expiry
        self._max_idle = max_idle_per_origin
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}

    # ------------------------------------------------------------------ pool

    def _take(self, origin: tuple[str, str, int]) -> _Conn | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.usable(now, self._expiry):
                return conn
            conn.close()
        return None

    def _give_back(self, origin: tuple[str, str, int], conn: _Conn) -> None:
        idle = self._idle.setdefault(origin, [])
        if len(idle) >= self._max_idle:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        idle.append(conn)

    async def _connect(self, origin: tuple[str, str, int], request: httpx.Request, timeout: float | None) -> _Conn:
        scheme, host, port = origin
        kw: dict = {}
        if scheme == "https":
            kw["ssl"] = self._ssl or ssl.create_default_context()
            sni = request.extensions.get("sni_hostname")
            kw["server_hostname"] = sni.decode() if isinstance(sni, bytes) else (sni or host)
        try:
            reader, writer = await _within(timeout, asyncio.open_connection(host, port, limit=_READ * 4, **kw),
                                           httpx.ConnectTimeout, request)
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from None
        return _Conn(reader, writer)

    # --------------------------------------------------------------- request

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.scheme
        if scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {scheme!r}", request=request)
        origin = (scheme, url.host, url.port or (443 if scheme == "https" else 80))
        timeouts = request.extensions.get("timeout") or {}
        head = self._head(request)
        body = b"".join([part async for part in request.stream])  # type: ignore[union-attr]
        if request.headers.get("transfer-encoding", "").lower() == "chunked":
            body = (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n"
        conn = self._take(origin) or await self._connect(origin, request, timeouts.get("connect"))
        try:
            try:
                conn.writer.write(head + body)
                if conn.writer.transport.get_write_buffer_size():  # what the socket did not take at once
                    await _within(timeouts.get("write"), conn.writer.drain(), httpx.WriteTimeout, request)
            except OSError as exc:
                raise httpx.WriteError(str(exc) or type(exc).__name__, request=request) from None
            read_timeout = timeouts.get("read")
            while True:
                status, reason, headers, keep = await self._read_head(conn, request, read_timeout)
                if not (100 <= status < 200) or status == 101:
                    break
        except BaseException:
            conn.close()
            raise
        method = request.method.upper()
        length: int | None = None
        chunked = False
        if method == "HEAD" or status in _NO_BODY_STATUS or 100 <= status < 200:
            length = 0
        else:
            te = b",".join(v for k, v in headers if k.lower() == b"transfer-encoding").lower()
            cl = [v for k, v in headers if k.lower() == b"content-length"]
            if te:
                chunked = te.rstrip().endswith(b"chunked")
                keep = keep and chunked
            elif cl:
                try:
                    length = int(cl[0])
                except ValueError:
                    conn.close()
                    raise httpx.RemoteProtocolError("bad Content-Length", request=request) from None
            else:
                keep = False  # the body ends with the connection
        stream = _Body(self, origin, conn, request, read_timeout, length, chunked, keep)
        return httpx.Response(status, headers=headers, stream=stream,
                              extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason})

    @staticmethod
    def _head(request: httpx.Request) -> bytes:
        target = request.url.raw_path or b"/"
        lines = [b"%s %s HTTP/1.1" % (request.method.encode("ascii"), target)]
        for name, value in request.headers.raw:
            if b"\r" in name or b"\n" in name or b"\r" in value or b"\n" in value or b":" in name:
                raise httpx.LocalProtocolError("illegal header name or value", request=request)
            lines.append(name + b": " + value)
        return b"\r\n".join(lines) + b"\r\n\r\n"

    async def _read_head(self, conn: _Conn, request: httpx.Request, timeout: float | None):
        try:
            raw = await _within(timeout, conn.reader.readuntil(b"\r\n\r\n"), httpx.ReadTimeout, request)
        except asyncio.IncompleteReadError:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request) from None
        except asyncio.LimitOverrunError:
            raise httpx.RemoteProtocolError("response head too large", request=request) from None
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from None
        lines = raw[:-4].split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise httpx.RemoteProtocolError("malformed status line", request=request)
        headers: list[tuple[bytes, bytes]] = []
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not name or name != name.strip():
                raise httpx.RemoteProtocolError("malformed header line", request=request)
            headers.append((name, value.strip(b" \t")))
        conn_tokens = b",".join(v for k, v in headers if k.lower() == b"connection").lower()
        keep = parts[0] == b"HTTP/1.1" and b"close" not in conn_tokens
        if request.headers.get("connection", "").lower() == "close":
            keep = False
        return int(parts[1]), (parts[2] if len(parts) > 2 else b""), headers, keep

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


class _Body(httpx.AsyncByteStream):
    def __init__(self, transport: LeanTransport, origin: tuple[str, str, int], conn: _Conn, request: httpx.Request,
                 timeout: float | None, length: int | None, chunked: bool, keep: bool) -> None:
        self._t, self._origin, self._conn, self._request = transport, origin, conn, request
        self._timeout, self._length, self._chunked, self._keep = timeout, length, chunked, keep
        self._done = False

    async def _read(self, n: int, exact: bool) -> bytes:
        reader = self._conn.reader
        buffered = len(reader._buffer)  # type: ignore[attr-defined]
        if buffered and (not exact or buffered >= n):  # answered from the buffer: no wait, no timer
            return await (reader.readexactly(n) if exact else reader.read(n))
        try:
            aw = reader.readexactly(n) if exact else reader.read(n)
            return await _within(self._timeout, aw, httpx.ReadTimeout, self._request)
        except asyncio.IncompleteReadError:
            raise httpx.RemoteProtocolError("peer closed connection without sending complete message body",
                                            request=self._request) from None
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=self._request) from None

    async def _line(self) -> bytes:
        try:
            return await _within(self._timeout, self._conn.reader.readuntil(b"\r\n"), httpx.ReadTimeout, self._request)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            raise httpx.RemoteProtocolError("malformed chunked body", request=self._request) from None
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=self._request) from None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._done:
            return
        try:
            if self._chunked:
                while True:
                    size_line = (await self._line()).split(b";", 1)[0].strip()
                    try:
                        size = int(size_line, 16)
                    except ValueError:
                        raise httpx.RemoteProtocolError("malformed chunk size", request=self._request) from None
                    if size == 0:
                        while (await self._line()) != b"\r\n":  # trailers
                            pass
                        break
                    data = await self._read(size + 2, exact=True)
                    yield data[:-2]
            elif self._length is not None:
                left = self._length
                while left > 0:
                    data = await self._read(min(left, _READ), exact=False)
                    if not data:
                        raise httpx.RemoteProtocolError("peer closed connection without sending complete message body",
                                                        request=self._request)
                    left -= len(data)
                    yield data
            else:
                while data := await self._read(_READ, exact=False):
                    yield data
        except BaseException:
            self._finish(reuse=False)
            raise
        self._finish(reuse=self._keep)

    def _finish(self, *, reuse: bool) -> None:
        if self._done:
            return
        self._done = True
        if reuse:
            self._t._give_back(self._origin, self._conn)
        else:
            self._conn.close()

    async def aclose(self) -> None:
        self._finish(reuse=False)  # a body not read to its end leaves the connection unusable
