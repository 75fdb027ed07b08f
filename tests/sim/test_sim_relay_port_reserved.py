"""A stopped soak relay keeps its loopback port bound (not listening): connections are refused as on
a closed port, and no other process can take the port meanwhile (a test worker's simulator binding
port 0 once answered 404 in the relay's place: orchestrator_sim/fleet/sim_fleet.py `_Listener._reserve`)."""

from __future__ import annotations

import asyncio
import socket

from starlette.applications import Starlette

from orchestrator_sim.fleet.sim_fleet import LOOPBACK, _Listener


def test_a_stopped_relay_keeps_its_port_and_refuses_connections():
    async def scenario() -> None:
        sock = socket.socket()
        sock.bind((LOOPBACK, 0))
        listener = _Listener(Starlette(), sock)
        assert listener.start()
        while not (listener.server and listener.server.started):
            await asyncio.sleep(0.01)
        await listener.stop()
        other = socket.socket()
        try:
            try:
                other.bind((LOOPBACK, listener.port))
                taken = True
            except OSError:
                taken = False
            assert not taken, "a stopped relay's port could be taken by another process"
            probe = socket.socket()
            try:
                assert probe.connect_ex((LOOPBACK, listener.port)) != 0  # refused, as a closed port
            finally:
                probe.close()
        finally:
            other.close()
        assert listener.start()  # and it listens again on the same port
        await listener.stop(reserve=False)
        listener.release_unused_socket()

    asyncio.run(scenario())
