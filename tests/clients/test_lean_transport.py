"""The lean HTTP/1.1 transport against a scripted loopback server: framing, keep-alive, httpx's errors."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from orchestrator.hosts.clients.errors import NOT_SENT
from orchestrator.hosts.clients.lean_transport import LeanTransport


class Server:
    """Answers each request on a connection with the next scripted reply (bytes, or a callable)."""

    def __init__(self, replies: list) -> None:
        self.replies = list(replies)
        self.requests: list[bytes] = []
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.replies:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                body = await reader.readexactly(length) if length else b""
                self.requests.append(head + body)
                reply = self.replies.pop(0)
                if reply == "close":
                    break
                if reply == "hang":
                    await asyncio.sleep(10)
                writer.write(reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self.srv = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.srv.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc) -> None:
        self.srv.close()


def ok(body: bytes = b'{"ok": true}', extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


async def test_content_length_bodies_reuse_one_connection():
    server = Server([ok(), ok(b'{"n": 2}')])
    async with server as url, httpx.AsyncClient(base_url=url, transport=LeanTransport()) as client:
        assert (await client.get("/a")).json() == {"ok": True}
        r = await client.post("/b", json={"x": 1})
        assert r.json() == {"n": 2} and r.status_code == 200 and r.reason_phrase == "OK"
    assert server.connections == 1
    assert server.requests[1].startswith(b"POST /b HTTP/1.1\r\n") and server.requests[1].endswith(b'{"x":1}')


async def test_chunked_body_streams_in_order_and_trailers_are_skipped():
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-T: 1\r\n\r\n"
    server = Server([chunked, ok()])
    async with server as url, httpx.AsyncClient(base_url=url, transport=LeanTransport()) as client:
        async with client.stream("GET", "/s") as r:
            parts = [p async for p in r.aiter_raw()]
        assert b"".join(parts) == b"hello world"
        assert (await client.get("/again")).json() == {"ok": True}
    assert server.connections == 1  # read to its end: the connection went back to the pool


async def test_body_to_end_of_connection_and_connection_close():
    server = Server([b"HTTP/1.1 200 OK\r\n\r\nuntil the end"])
    async with server as url, httpx.AsyncClient(base_url=url, transport=LeanTransport()) as client:
        assert (await client.get("/")).text == "until the end"
    server = Server([ok(extra=b"Connection: close\r\n"), ok()])
    async with server as url, httpx.AsyncClient(base_url=url, transport=LeanTransport()) as client:
        await client.get("/")
        await client.get("/")
    assert server.connections == 2


async def test_a_body_closed_early_is_not_reused():
    server = Server([ok(b"x" * 100000), ok()])
    async with server as url, httpx.AsyncClient(base_url=url, transport=LeanTransport()) as client:
        async with client.stream("GET", "/big") as r:
            await r.aiter_raw().__anext__()
        assert (await client.get("/")).json() == {"ok": True}
    assert server.connections == 2


async def test_a_connection_the_peer_closed_while_idle_is_not_reused():
    server = Server([ok()])  # the server closes after one reply
    async with server as url, httpx.AsyncClient(base_url=url, transport=LeanTransport()) as client:
        await client.get("/")
        await asyncio.sleep(0.05)
        server.replies.append(ok(b'{"second": true}'))
        assert (await client.get("/")).json() == {"second": True}
    assert server.connections == 2


async def test_idle_connections_expire():
    server = Server([ok(), ok()])
    transport = LeanTransport(keepalive_expiry=0.0)
    async with server as url, httpx.AsyncClient(base_url=url, transport=transport) as client:
        await client.get("/")
        server.replies.append(ok())
        await client.get("/")
    assert server.connections == 2


async def test_errors_are_httpx_errors_and_a_refused_connect_counts_as_not_sent():
    async with Server(["close"]) as url, httpx.AsyncClient(base_url=url, transport=LeanTransport()) as client:
        with pytest.raises(httpx.RemoteProtocolError) as err:
            await client.get("/")
        assert not isinstance(err.value, NOT_SENT)
    async with Server(["hang"]) as url, httpx.AsyncClient(base_url=url, transport=LeanTransport(), timeout=0.2) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.get("/")
    srv = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    srv.close()
    await srv.wait_closed()
    async with httpx.AsyncClient(transport=LeanTransport()) as client:
        with pytest.raises(httpx.ConnectError) as err:
            await client.get(f"http://127.0.0.1:{port}/")
        assert isinstance(err.value, NOT_SENT)
        with pytest.raises(httpx.UnsupportedProtocol):
            await LeanTransport().handle_async_request(httpx.Request("GET", "ftp://x/"))


async def test_a_header_with_a_newline_is_refused_before_anything_is_sent():
    server = Server([ok()])
    async with server as url, httpx.AsyncClient(base_url=url, transport=LeanTransport()) as client:
        request = client.build_request("GET", "/")
        request.headers._list.append((b"X-Bad", b"x-bad", b"a\r\nInjected: 1"))  # past httpx's own checks
        with pytest.raises(httpx.LocalProtocolError):
            await client.send(request)
    assert server.requests == []


async def test_head_and_204_carry_no_body():
    server = Server([b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n", b"HTTP/1.1 204 No Content\r\n\r\n", ok()])
    async with server as url, httpx.AsyncClient(base_url=url, transport=LeanTransport()) as client:
        assert (await client.head("/")).content == b""
        assert (await client.delete("/")).status_code == 204
        assert (await client.get("/")).json() == {"ok": True}
    assert server.connections == 1


def _self_signed(tmp_path):
    """A certificate for `localhost`, made here (no network, no file of the project)."""
    import datetime
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert_file, key_file)
    trusting = ssl.create_default_context(cafile=str(cert_file))
    return server, trusting


async def test_tls_verifies_the_peer_with_the_given_context(tmp_path):
    import ssl

    server_ctx, trusting = _self_signed(tmp_path)
    server = Server([ok(), ok(b'{"n": 2}')])
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=server_ctx)
    port = srv.sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient(base_url=f"https://localhost:{port}", transport=LeanTransport(verify=trusting)) as client:
            assert (await client.get("/a")).json() == {"ok": True}
            assert (await client.get("/b")).json() == {"n": 2}
        assert server.connections == 1
        async with httpx.AsyncClient(base_url=f"https://localhost:{port}",
                                     transport=LeanTransport(verify=ssl.create_default_context())) as client:
            with pytest.raises(httpx.ConnectError):  # not trusted: refused before anything is sent
                await client.get("/c")
    finally:
        srv.close()
