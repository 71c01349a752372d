"""Run a route's whole synchronous part - authentication, permission, work - in one thread hop.

FastAPI runs every synchronous dependency in the thread pool on its own (the session
generator twice, settings, caller, participant, study: 7 hops of about 55 us CPU and 185 us
wall each on the reference machine). The model read and the streaming gradient route call
the permission functions of ``coordinator.api.deps`` inside the single hop this module gives
them. Contribution ingest does not come here: it runs in its process's group-commit writer
(``coordinator.services.group_commit``), one thread and one transaction per batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from fastapi import Request
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from coordinator.config import Settings

T = TypeVar("T")


async def in_one_hop(request: Request, work: Callable[[Session, Settings], T]) -> T:
    """``work(session, settings)`` in one worker thread, with a session closed afterwards."""
    state = request.app.state

    def run() -> T:
        with state.sessionmaker() as session:
            return work(session, state.settings)

    return await run_in_threadpool(run)
