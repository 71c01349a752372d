"""ASGI middleware: access log + metrics, request deadlines, body timeout and size limit.

Order (outermost first): ``AccessLogMiddleware`` sees every answer, ``TimeoutMiddleware``
drops a stalled body with 408 and answers 503 + ``Retry-After`` when a handler (usually one
waiting for a frozen database) has not answered in time, ``BodyLimitMiddleware`` refuses
bodies over the size limit with 413.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator.metrics import LATENCY, REQUESTS, method_label
from coordinator.reclaim import Reclaimer

log = logging.getLogger("fedod.access")
WARN_STATUSES = frozenset({401, 403, 408, 409, 413, 429, 503})


async def reply(
    send: Send, status: int, detail: str, headers: dict[str, str] | None = None
) -> None:
    """Send a whole JSON ``{"detail": ...}`` response."""
    body = json.dumps({"detail": detail}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class BodyLimitMiddleware:
    """Refuse bodies over ``max_bytes`` with 413.

    A declared ``Content-Length`` over the limit is refused before a byte is read; a body
    without one (chunked) is read up to the limit and refused as soon as it passes it.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> str:
        return f"request body larger than {self.max_bytes} bytes (FEDOD_MAX_BODY_BYTES)"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit():
                await reply(send, 400, "invalid Content-Length header")
            elif int(length) > self.max_bytes:
                await reply(send, 413, self._too_large(), {"connection": "close"})
            else:
                await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await reply(send, 413, self._too_large(), {"connection": "close"})
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


@dataclass
class _Exchange:
    started: bool = False
    abandoned: bool = False
    stalled: bool = False


def _expects_body(scope: Scope) -> bool:
    headers = dict(scope["headers"])
    return headers.get(b"content-length", b"0") != b"0" or b"transfer-encoding" in headers


def _consume(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()  # an abandoned handler's error has nobody left to answer


class TimeoutMiddleware:
    """408 for a body that stalls ``body_timeout_s``; 503 for a handler slower than the deadline.

    The deadline starts once the body is in. A handler past it keeps running in its thread
    (a thread cannot be cancelled) but its answer is dropped; the client gets 503 with
    ``Retry-After`` and ``Connection: close``. The memory of a dropped body is given back
    (:class:`~coordinator.reclaim.Reclaimer`).
    """

    def __init__(
        self, app: ASGIApp, *, body_timeout_s: float, request_timeout_s: float, retry_after_s: int
    ) -> None:
        self.app = app
        self.body_timeout_s = body_timeout_s
        self.request_timeout_s = request_timeout_s
        self.retry_after = str(retry_after_s)
        self.reclaimer = Reclaimer(min_interval_s=body_timeout_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        state = _Exchange()
        ended: asyncio.Future[None] = loop.create_future()  # handler done, or the deadline
        deadline: list[asyncio.TimerHandle] = []

        def end(_: object = None) -> None:
            if not ended.done():
                ended.set_result(None)

        def body_is_in() -> None:
            if not deadline:
                deadline.append(loop.call_later(self.request_timeout_s, end))

        if not _expects_body(scope):
            body_is_in()

        async def timed_receive() -> Message:
            try:
                async with asyncio.timeout(self.body_timeout_s):
                    message = await receive()
            except TimeoutError:
                state.stalled = True
                if not state.started:
                    state.started = state.abandoned = True
                    detail = f"request body stalled for {self.body_timeout_s:g} s " \
                        "(FEDOD_BODY_TIMEOUT_S)"
                    await reply(send, 408, detail, {"connection": "close"})
                return {"type": "http.disconnect"}
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_is_in()
            return message

        async def guarded_send(message: Message) -> None:
            if state.abandoned:
                return
            if message["type"] == "http.response.start":
                state.started = True
            await send(message)

        try:
            task = asyncio.ensure_future(self.app(scope, timed_receive, guarded_send))
            task.add_done_callback(end)
            await ended
            if task.done() or state.started:
                await task
                return
            state.started = state.abandoned = True
            task.add_done_callback(_consume)
            detail = "the request did not finish in time (it may still complete); retry later"
            await reply(send, 503, detail, {"retry-after": self.retry_after, "connection": "close"})
        finally:
            for timer in deadline:
                timer.cancel()
            if state.stalled:  # the dropped body sits in reference cycles: free it
                self.reclaimer.request()


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return client[0] if client else "-"


class AccessLogMiddleware:
    """One log line and metric sample per request, labelled by method and route template.

    Labels come from fixed sets (``method_label``, the matched route or ``unmatched``), so a
    client cannot create new series. 401/403/409 and other refusals are warnings, 5xx errors.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            elapsed = time.perf_counter() - start
            route = getattr(scope.get("route"), "path", "unmatched")
            method = method_label(scope["method"])
            REQUESTS.labels(method, route, str(status)).inc()
            LATENCY.labels(method, route).observe(elapsed)
            level = (
                logging.WARNING if status in WARN_STATUSES
                else logging.ERROR if status >= 500
                else logging.INFO
            )
            duration_ms = round(elapsed * 1000, 2)
            client = _client(scope)
            log.log(
                level,
                "%s %s %d %.2fms client=%s",
                method, scope["path"][:200], status, duration_ms, client,
                extra={"method": method, "path": scope["path"][:200], "route": route,
                       "status": status, "duration_ms": duration_ms, "client": client},
            )
