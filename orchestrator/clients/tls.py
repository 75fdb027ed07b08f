"""One TLS context for every HTTP client of the process.

Each `httpx.AsyncClient()` otherwise loads the CA bundle anew (35-49 ms of blocking CPU, seven
clients per run: measured in bench/, docs/performance.md). Certificate verification stays on.
"""

from __future__ import annotations

import ssl
from functools import lru_cache


@lru_cache(maxsize=1)
def shared_context() -> ssl.SSLContext:
    return ssl.create_default_context()
