"""Group commit: the contributions waiting in one process are stored in one transaction.

A contribution's write is short (two statements on PostgreSQL, five in-process on SQLite), but
its COMMIT waits for the log flush (an fsync), and one commit per contribution capped ingest
(SQLite at 60-120 contributions/s on the reference disk). Here each worker process has one
:class:`GroupWriter`: the route validates and decodes a release as before, then hands it to
the writer and waits; the writer stores everything that is pending in one transaction
(:func:`store_batch`), commits once, and only then answers each waiting request. Durability
is unchanged: a request is answered after the commit that holds its release and its charge;
a crash before that commit loses both (the participant retries with the same key).

Exactness under several workers comes from the same locks as one release at a time
(``services.charge``, ``services.charge_pg``), taken in one global order so that two batches
cannot deadlock: on PostgreSQL every participant row of the batch first, in id order (one
``SELECT ... FOR UPDATE``), then the study counter rows in study order (the items run sorted
by study). A single release takes participant then study, the same order.

An item whose conditional charge matched no row is answered :data:`REFUSED` (nothing of it
was written; the caller finds out why in its own transaction). Any error in the batch - a
config re-signed meanwhile, an idempotency key stored meanwhile by another worker, a lost
connection, a deadlock with another path - rolls the whole batch back and answers every item
:data:`ALONE`: the caller then stores it in its own transaction, exactly as without group
commit (a key stored by an earlier attempt whose commit did happen is then a replay, so a
retry never charges twice). A key that occurs twice in one batch runs alone after it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from coordinator.services import driver_sql
from coordinator.services.charge import Stored
from coordinator.services.contributions import Prepared, writer_for

REFUSED: Final = "refused"
ALONE: Final = "alone"
Result = Stored | str

LOCK_PARTICIPANTS = text("SELECT id FROM participants WHERE id = ANY(:ids) ORDER BY id FOR UPDATE")
MAX_BATCH = 64


def store_batch(session: Session, items: list[Prepared]) -> list[Result]:
    """Store ``items`` in one transaction of ``session`` and commit; one result per item."""
    results: list[Result] = [ALONE] * len(items)
    seen: set[tuple[int, str, str]] = set()
    order = []
    for i in sorted(range(len(items)), key=lambda i: _lock_key(items[i])):
        r = items[i].release
        key = (r.participant_id, r.study_id, r.idempotency_key)
        if key not in seen:  # a repeated key runs alone, after this batch
            seen.add(key)
            order.append(i)
    try:
        conn = session.connection()
        ids = sorted({items[i].release.participant_id for i in order})
        if len(ids) > 1 and conn.dialect.name == "postgresql":
            driver_sql.fetch(conn, LOCK_PARTICIPANTS, {"ids": ids})
        write = writer_for(conn)
        for i in order:
            stored = write(conn, items[i].release, items[i].check)
            results[i] = REFUSED if stored is None else stored
        session.commit()
    except Exception:  # every item runs again alone, which reports its own error
        session.rollback()
        return [ALONE] * len(items)
    return results


def _lock_key(item: Prepared) -> tuple[str, int]:
    return item.release.study_id, item.release.participant_id


Waiter = tuple[Prepared, asyncio.AbstractEventLoop, "asyncio.Future[Result]"]


class GroupWriter:
    """One per process: batches the pending releases, one writer thread, one commit a batch.

    Not bound to an event loop: each waiter carries its own loop, and the batches run on the
    writer's own thread, one at a time; releases that arrive while a batch runs form the next.
    """

    def __init__(self, factory: sessionmaker[Session],
                 store: Callable[[Session, list[Prepared]], list[Result]] = store_batch) -> None:
        self._factory = factory
        self._store = store
        self._lock = threading.Lock()
        self._pending: list[Waiter] = []
        self._busy = False
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="fedod-group-commit")

    async def write(self, item: Prepared) -> Result:
        """Store ``item`` with whatever else is pending; a :class:`Stored` once committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result] = loop.create_future()
        with self._lock:
            self._pending.append((item, loop, future))
            start, self._busy = not self._busy, True
        if start:
            self._thread.submit(self._drain)
        return await future

    def _drain(self) -> None:
        while True:
            with self._lock:
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                if not batch:
                    self._busy = False
                    return
            try:
                with self._factory() as session:
                    results = self._store(session, [item for item, _, _ in batch])
            except Exception:  # e.g. no connection: each runs alone and reports its error
                results = [ALONE] * len(batch)
            for (_, loop, future), result in zip(batch, results, strict=True):
                with contextlib.suppress(RuntimeError):  # that request's loop is closed
                    loop.call_soon_threadsafe(_settle, future, result)


def _settle(future: asyncio.Future[Result], result: Result) -> None:
    if not future.done():  # the request may have been cancelled meanwhile
        future.set_result(result)


_writers_lock = threading.Lock()


def writer_of(state: object) -> GroupWriter:
    """The process's writer kept on ``app.state`` (created on first use)."""
    writer = getattr(state, "group_writer", None)
    if writer is None:
        with _writers_lock:
            writer = getattr(state, "group_writer", None)
            if writer is None:
                writer = GroupWriter(state.sessionmaker)  # type: ignore[attr-defined]
                state.group_writer = writer  # type: ignore[attr-defined]
    return writer
