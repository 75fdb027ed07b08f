"""The container's HEALTHCHECK (`python -m orchestrator.teamserver.healthcheck`): /healthz of the
`orchestrate serve` inside, over loopback, plain HTTP or TLS (certificate not checked, no token).
Exit 0 healthy (200, or 401 under `--protect-metrics`; also a container running another command),
1 unhealthy. Port: $ORCHESTRATOR_SERVER_PORT, else `serve --port N`, else 8000. Standard library only.
"""

from __future__ import annotations

import http.client
import os
import ssl
import sys
from pathlib import Path


def _main_command(proc1: Path = Path("/proc/1/cmdline")) -> list[str] | None:
    """The container's main process argv (PID 1 in a container), None when unreadable."""
    try:
        raw = proc1.read_bytes()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _port(argv: list[str] | None, env: dict[str, str]) -> int:
    if argv:
        for i, arg in enumerate(argv):
            if arg == "--port" and i + 1 < len(argv) and argv[i + 1].isdigit():
                return int(argv[i + 1])
            if arg.startswith("--port=") and arg[7:].isdigit():
                return int(arg[7:])
    value = env.get("ORCHESTRATOR_SERVER_PORT", "")
    return int(value) if value.isdigit() else 8000


def serves(argv: list[str] | None) -> bool:
    """True when the main process is `orchestrate serve` (unknown: assume it is, and ask)."""
    if argv is None:
        return True
    return "serve" in argv[1:] and "token" not in argv[1:]


def probe(port: int, *, host: str = "127.0.0.1", timeout: float = 3.0) -> tuple[bool, str]:
    """(healthy, what was seen) for the server on host:port, trying HTTP and then HTTPS."""
    seen = []
    tls = ssl.create_default_context()
    tls.check_hostname = False
    tls.verify_mode = ssl.CERT_NONE
    for conn in (http.client.HTTPConnection(host, port, timeout=timeout),
                 http.client.HTTPSConnection(host, port, timeout=timeout, context=tls)):
        try:
            conn.request("GET", "/healthz", headers={"Host": f"{host}:{port}"})
            status = conn.getresponse().status
        except (OSError, http.client.HTTPException) as exc:
            seen.append(f"{type(conn).__name__[:5].lower()}: {exc.__class__.__name__}")
            continue
        finally:
            conn.close()
        if status in (200, 401):
            return True, f"/healthz answered {status}"
        return False, f"/healthz answered {status}"
    return False, f"no answer on 127.0.0.1:{port} ({', '.join(seen)})"


def main(argv: list[str] | None = None, env: dict[str, str] | None = None) -> int:
    command = _main_command() if argv is None else argv
    if not serves(command):
        print("healthy: the container runs a command, not `orchestrate serve`")
        return 0
    ok, what = probe(_port(command, dict(os.environ) if env is None else env))
    print(("healthy: " if ok else "unhealthy: ") + what)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
