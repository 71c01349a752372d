"""Run uvicorn with ``TCP_NODELAY`` on every connection, one worker or many.

With ``--workers`` > 1 uvicorn binds the shared listening socket itself with protocol 0, and
asyncio only sets ``TCP_NODELAY`` on accepted sockets whose protocol is ``IPPROTO_TCP``: every
response then waited about 40 ms (Nagle holding the body behind the unacknowledged header
segment, the client delaying its ACK), capping a keep-alive connection at about 22 requests/s.
Linux copies ``TCP_NODELAY`` from a listening socket to the sockets it accepts, so setting it
there fixes every worker.
"""

from __future__ import annotations

import socket
import sys
from typing import Any

import uvicorn
from uvicorn.supervisors import Multiprocess

STARTUP_FAILURE = 3


class NoDelayConfig(uvicorn.Config):
    """A uvicorn config whose listening TCP socket has ``TCP_NODELAY`` set."""

    def bind_socket(self) -> socket.socket:
        sock = super().bind_socket()
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock


def run(app: str, **kwargs: Any) -> None:
    """``uvicorn.run(app, **kwargs)`` with :class:`NoDelayConfig` (``app`` an import string)."""
    config = NoDelayConfig(app, **kwargs)
    server = uvicorn.Server(config=config)
    if config.workers > 1:
        Multiprocess(config, sockets=[config.bind_socket()]).run()
        return
    server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)
