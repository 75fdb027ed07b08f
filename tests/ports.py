"""A TCP port for a server a test starts in another process or thread.

A port the kernel hands out for `bind(("127.0.0.1", 0))` comes from the ephemeral range, the same
range every outgoing loopback connection of a busy suite draws its local port from: between the
probe closing its socket and the server binding, a client connection can take it ("Address already
in use"). Ports below the ephemeral range are never given to outgoing connections, so a free one
picked there stays free unless another test picks the same one, which a random pick over thousands
of ports makes unlikely, and the bind probe rules out for ports already bound.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _below_ephemeral() -> range:
    try:
        low = int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default ephemeral range starts here
    return range(max(1024, low - 12000), low)


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on and no outgoing connection will be given."""
    ports = _below_ephemeral()
    for _ in range(200):
        port = random.choice(ports)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1}")
