"""How ``serve`` runs uvicorn: limits, timeouts, trusted proxies, and a header timeout.

uvicorn's HTTP/1.1 protocol gets a header timeout here (uvicorn has none of its own).
A connection that has not sent a complete request head within ``FEDOD_HEADER_TIMEOUT_S`` of
opening (or of the first byte of a later keep-alive request) is closed, so idle and slow-header
sockets cannot pile up until the process runs out of file descriptors. Idle keep-alive
connections are closed by uvicorn's own ``--timeout-keep-alive``.

``TCP_NODELAY`` is set on the listening socket (:func:`run`). With ``--workers`` > 1 uvicorn
binds the shared listening socket itself with protocol 0, and asyncio only sets
``TCP_NODELAY`` on accepted sockets whose protocol is ``IPPROTO_TCP``: every response then
waited about 40 ms (Nagle holding the body behind the unacknowledged header segment, the
client delaying its ACK), capping a keep-alive connection at about 22 requests/s. Linux
copies ``TCP_NODELAY`` from a listening socket to the sockets it accepts.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import socket
import sys
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.supervisors import Multiprocess

from coordinator.config import Settings
from coordinator.logs import log_config


class HeaderTimeoutH11Protocol(H11Protocol):
    """``H11Protocol`` that closes connections slower than the header timeout."""

    header_timeout_s: float | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if HeaderTimeoutH11Protocol.header_timeout_s is None:
            HeaderTimeoutH11Protocol.header_timeout_s = Settings().header_timeout_s
        self._header_timer: asyncio.TimerHandle | None = None

    def _arm(self) -> None:
        assert self.header_timeout_s is not None
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._on_header_timeout)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm()  # the request head is in
        elif self._header_timer is None and not self.transport.is_closing():
            self._arm()  # first bytes of a later request on a kept-alive connection

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _on_header_timeout(self) -> None:
        self._header_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def raise_file_limit(needed: int) -> int:
    """Raise the soft open-files limit to the hard one; refuse if ``needed`` does not fit."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):  # e.g. an unlimited hard limit
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if limit != resource.RLIM_INFINITY and limit < needed:
        raise ValueError(
            f"FEDOD_LIMIT_CONCURRENCY needs about {needed} open files per worker but the limit "
            f"is {limit}; lower FEDOD_LIMIT_CONCURRENCY or raise `ulimit -n`"
        )
    return int(limit)


def uvicorn_options(args: Any, settings: Settings) -> dict[str, Any]:
    """Keyword arguments of ``uvicorn.run`` for ``fedod-coordinator serve``."""
    return {
        "factory": True,
        "host": args.host,
        "port": args.port,
        "workers": args.workers,
        "log_config": log_config(settings.log_level, json_lines=settings.log_json),
        "http": HeaderTimeoutH11Protocol,
        "proxy_headers": True,
        "forwarded_allow_ips": settings.forwarded_allow_ips,
        "limit_concurrency": settings.limit_concurrency,
        "timeout_keep_alive": settings.keep_alive_timeout_s,
        "h11_max_incomplete_event_size": settings.max_header_bytes,
        "timeout_graceful_shutdown": 10,
        "server_header": False,
    }


STARTUP_FAILURE = 3


class NoDelayConfig(uvicorn.Config):
    """A uvicorn config whose listening TCP socket has ``TCP_NODELAY`` set, and whose worker
    freezes its start-up heap once the app is loaded."""

    def load(self) -> None:
        """Load the app, then ``gc.freeze()`` what start-up left alive (modules, the app, the
        engine): the collector then no longer walks those objects on every full pass."""
        super().load()
        gc.collect()
        gc.freeze()

    def bind_socket(self) -> socket.socket:
        sock = super().bind_socket()
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock


_ACCEPT_PARAMS = list(inspect.signature(
    asyncio.selector_events.BaseSelectorEventLoop._accept_connection  # type: ignore[attr-defined]
).parameters)


class TakeTurnsLoop(asyncio.SelectorEventLoop):
    """An event loop that accepts one pending connection per wake-up of a listening socket.

    uvicorn's workers share one listening socket, and asyncio accepts every pending connection
    (up to the backlog) in one go: whichever worker woke first took a whole burst, so 8
    keep-alive connections opened together often landed 8 / 0 or 6 / 2, and one worker's
    core capped the server while the other idled (``tests/benchmarks/bench_coordinator.py``
    shows each worker's share). Every worker is woken for a pending connection; taking one per
    wake-up lets them take turns. The listen backlog is unchanged.
    """

    if _ACCEPT_PARAMS[:6] == ["self", "protocol_factory", "sock", "sslcontext", "server",
                              "backlog"]:  # else (another asyncio) a plain loop

        def _accept_connection(self, protocol_factory: Any, sock: Any, sslcontext: Any = None,
                               server: Any = None, backlog: int = 100, *args: Any) -> None:
            super()._accept_connection(  # type: ignore[misc]
                protocol_factory, sock, sslcontext, server, 1, *args)


def run(app: str, **kwargs: Any) -> None:
    """``uvicorn.run(app, **kwargs)`` with :class:`NoDelayConfig` (``app`` an import string)
    and, unless another ``loop`` is given, :class:`TakeTurnsLoop`."""
    kwargs.setdefault("loop", "coordinator.server:TakeTurnsLoop")
    config = NoDelayConfig(app, **kwargs)
    server = uvicorn.Server(config=config)
    if config.workers > 1:
        Multiprocess(config, sockets=[config.bind_socket()]).run()
        return
    server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)
