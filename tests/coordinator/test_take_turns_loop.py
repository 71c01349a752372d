"""``TakeTurnsLoop`` accepts one pending connection per wake-up; asyncio's own loop takes all."""

from __future__ import annotations

import asyncio
import socket

import pytest

from coordinator.server import TakeTurnsLoop


@pytest.mark.parametrize(("loop_class", "taken"), [(TakeTurnsLoop, 1),
                                                    (asyncio.SelectorEventLoop, 3)])
def test_one_wake_up_takes_one_pending_connection(loop_class: type, taken: int) -> None:
    loop = loop_class()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    clients = [socket.create_connection(listener.getsockname()) for _ in range(3)]
    accepted: list[asyncio.BaseTransport] = []
    left: list[socket.socket] = []

    class Protocol(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            accepted.append(transport)

    try:
        loop._accept_connection(Protocol, listener, None, None, 100)  # one readiness event
        while len(accepted) < taken:  # the accepted sockets' set-up tasks
            loop.run_until_complete(asyncio.sleep(0))
        while True:  # what the wake-up left pending in the kernel's queue
            try:
                left.append(listener.accept()[0])
            except BlockingIOError:
                break
        assert (len(accepted), len(left)) == (taken, 3 - taken)
    finally:
        for sock in (*clients, *left, listener):
            sock.close()
        for transport in accepted:
            transport.close()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
