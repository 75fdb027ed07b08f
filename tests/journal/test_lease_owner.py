"""Lease owners carry hostname, pid, boot id and process start time, so that a lease whose holder
process is gone (same machine, same boot) can be taken over at once; on any doubt it cannot."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from waiting import wait_until

from orchestrator.journal.owner import boot_id, holder_gone, owner_text, parse_owner, start_ticks

pytestmark = pytest.mark.skipif(not boot_id() or start_ticks(os.getpid()) is None, reason="needs Linux /proc")


def _child_owner() -> tuple[subprocess.Popen, str]:
    """A child process that prints its owner text, then lives until it is killed (or its stdin closes)."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from orchestrator.journal.owner import owner_text; "
                             "print(owner_text(), flush=True); sys.stdin.read()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


def test_this_process_round_trips_and_is_alive():
    owner = parse_owner(owner_text())
    assert (owner.hostname, owner.pid, owner.boot_id) == (socket.gethostname(), os.getpid(), boot_id())
    assert owner.start_ticks == start_ticks(os.getpid())
    assert not holder_gone(owner_text())


def test_a_live_process_is_not_gone_an_exited_one_is():
    proc, owner = _child_owner()
    try:
        assert parse_owner(owner).pid == proc.pid
        assert not holder_gone(owner)
    finally:
        proc.kill()
    proc.wait()
    assert holder_gone(owner)


def test_a_killed_unreaped_process_is_gone():
    proc, owner = _child_owner()
    proc.kill()
    # not waited for: a zombie still answers kill(pid, 0); the kill lands asynchronously
    wait_until(lambda: holder_gone(owner), "the killed, unreaped child to be seen gone")
    proc.wait()


def test_a_reused_pid_is_gone():
    proc, owner = _child_owner()
    try:
        o = parse_owner(owner)
        assert not holder_gone(owner)
        assert holder_gone(f"{o.hostname}:{o.pid}:{o.boot_id}:{o.start_ticks + 1}")  # same pid, another process
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("text", [
    "vm:1",  # the old owner format: liveness unknown
    "server via cli on vm:1",
    f"another-host:{2**22 + 7}:{boot_id()}:1",  # another machine: cannot look
    f"{socket.gethostname()}:{2**22 + 7}:00000000-0000-0000-0000-000000000000:1",  # another boot
    "",
])
def test_on_any_doubt_the_holder_is_not_gone(text):
    assert not holder_gone(text)


def test_a_nonexistent_pid_on_this_machine_and_boot_is_gone():
    pid = 2**22 + 7  # above pid_max's default; never a live process here
    assert holder_gone(f"{socket.gethostname()}:{pid}:{boot_id()}:1")
