"""Shared fixtures for the client tests (imported by module name; not a conftest)."""

from __future__ import annotations

import json

import httpx
from fast_retry import immediate_retry

from orchestrator.hosts.clients.compose_manager import ComposeRequest
from orchestrator.hosts.envmap import EnvMap

BASE = "http://cm.test:8080"
TOKEN = "cm-token-0123456789abcdef"
NEW_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"
R2 = "model-sg-glm53-w4afp8-tp4-r2"
ENV = EnvMap(
    {
        "PROXY_TOKEN": "proxy-secret-value-42",
        "HUGGING_FACE_HUB_TOKEN": "hf_abcdefghijklmnop",
        "ENV": "prod",
        "CVM_NAME": "cvm-gpu02-label",
        "HOST_IP": "10.1.2.3",
        "QUOTED": 'has"quote\\and-backslash',
        "GLM53_HICACHE_RAM_BUDGET": "406GiB",
        "SHORT": "1",
    }
)
REQ = ComposeRequest(tag="v2026.09.20-long", file=NEW_FILE, services=(R2,))
FAST = immediate_retry(busy_retries=3, max_attempts=4)


class ChunkStream(httpx.AsyncByteStream):
    """A response body delivered in chunks, optionally failing after the last one."""

    def __init__(self, chunks: list[bytes], exc: Exception | None = None) -> None:
        self.chunks, self.exc = chunks, exc

    async def __aiter__(self):
        for chunk in self.chunks:
            yield chunk
        if self.exc is not None:
            raise self.exc

    async def aclose(self) -> None:
        pass


def event_line(kind: str, data: str) -> bytes:
    return json.dumps({"event": kind, "data": data}).encode() + b"\n"


def done_line(success: bool = True, exit_code: int = 0) -> bytes:
    return json.dumps({"event": "done", "success": success, "exit_code": exit_code}).encode() + b"\n"


def stream(*chunks: bytes, exc: Exception | None = None, status: int = 200) -> httpx.Response:
    return httpx.Response(status, stream=ChunkStream(list(chunks), exc), headers={"content-type": "application/x-ndjson"})


def error(status: int, message: str) -> httpx.Response:
    return httpx.Response(status, json={"status": "error", "error": message})


HTML_502 = httpx.Response(
    502, text="<html><head><title>502 Bad Gateway</title></head><body><center>502 Bad Gateway</center></body></html>",
    headers={"content-type": "text/html"},
)
