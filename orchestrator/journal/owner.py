"""Who holds a lease, and whether that process still exists.

A lease's owner is `HOSTNAME:PID:BOOT_ID:START` (`vm:4242:0f1e...:123456`): hostname, process id,
the kernel's boot id (/proc/sys/kernel/random/boot_id) and the process's start time in clock ticks
since boot (/proc/PID/stat field 22). Other owner text (`HOSTNAME:PID`, no /proc) is valid and
never presumed dead.

`holder_gone(owner)` is True only when the holder is certainly gone: same hostname and boot, and
`os.kill(pid, 0)` finds no process, a zombie, or one started at another time (a reused pid). On any
doubt it is False and the lease only lapses at its TTL. So `orchestrate resume` takes over at once
after a Ctrl-C, SIGKILL or closed terminal on the same machine, never from a live runner.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from functools import lru_cache

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
_OWNER_RE = re.compile(r"^(?P<host>[^:\s]+):(?P<pid>\d+):(?P<boot>[0-9a-fA-F-]{8,64}):(?P<start>\d+)$")


@dataclass(frozen=True)
class ProcessOwner:
    hostname: str
    pid: int
    boot_id: str
    start_ticks: int


@lru_cache(maxsize=1)
def boot_id() -> str:
    """This kernel's boot id; '' where there is none (not Linux)."""
    try:
        with open(BOOT_ID_PATH, encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat from field 3 (state) on; None if the process or /proc does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: fields after the last ')'
    return raw[raw.rfind(")") + 2:].split()


def start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks after boot), None if it does not exist or /proc is absent."""
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields else None  # field 22 overall
    except (IndexError, ValueError):
        return None


def owner_text() -> str:
    """The owner text every runner of this process uses (`HOSTNAME:PID` where the boot id or
    the start time is unknown)."""
    me = f"{socket.gethostname()}:{os.getpid()}"
    start = start_ticks(os.getpid())
    return f"{me}:{boot_id()}:{start}" if boot_id() and start is not None else me


def parse_owner(text: str) -> ProcessOwner | None:
    m = _OWNER_RE.match(text or "")
    if m is None:
        return None
    return ProcessOwner(m["host"], int(m["pid"]), m["boot"], int(m["start"]))


def holder_gone(owner: str) -> bool:
    """True only if the owner's process certainly no longer runs (see the module docstring)."""
    holder = parse_owner(owner)
    if holder is None or holder.hostname != socket.gethostname() or not boot_id() or holder.boot_id != boot_id():
        return False
    if holder.pid == os.getpid():
        return False
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # exists, another user's
        pass
    except OSError:
        return False
    # it exists: gone all the same if it is a zombie (killed, not yet reaped) or another process
    # that got the pid since
    if (_stat_fields(holder.pid) or [""])[0] in ("Z", "X"):
        return True
    started = start_ticks(holder.pid)
    return started is not None and started != holder.start_ticks


def describe_owner(owner: str) -> str:
    """`pid 4242 on vm` for a parsed owner, else the text itself (for messages)."""
    holder = parse_owner(owner)
    return f"pid {holder.pid} on {holder.hostname}" if holder else owner
