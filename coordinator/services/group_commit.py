"""Group commit: the contributions waiting in one process are stored in one transaction.

A contribution's write is short (two statements on PostgreSQL, five in-process on SQLite), but
its COMMIT waits for the log flush (an fsync), and one commit per contribution capped ingest
(SQLite at 60-120 contributions/s on the reference disk). Here each worker process has one
:class:`GroupWriter`: the route hands its request to the writer and waits; the writer's
thread takes everything pending, checks and decodes each release (same checks, errors and
status codes as before), stores the valid ones in one transaction (:func:`store_batch`),
commits once, and only then answers each waiting request (then, on SQLite, reports the
payload it stored to the WAL checkpointer, ``coordinator.db.sqlite_checkpoint``). Durability
is unchanged: a request is answered after the commit that holds its release and its charge;
a crash before that commit loses both (the participant retries with the same key).

Exactness under several workers comes from the same locks as one release at a time
(the ledger writer, ``coordinator.ledger.charge``), taken in one global order so that two
batches cannot deadlock: on PostgreSQL every participant row of the batch first, in id order,
then every study counter row in study order (``charge.store_many``; a single release takes
participant then study too); SQLite has one writer at a time. Each batch first looks up all
its callers in one query (``ingest_lookup.lookup_many``; on SQLite in a read snapshot that
takes no lock, ``db.READ``) and checks out (and, after idling, pings) its connection once.

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
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final, TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from coordinator.db.engine import READ
from coordinator.db.sqlite_checkpoint import Checkpointer
from coordinator.ledger import charge
from coordinator.ledger.releases import Stored
from coordinator.services.contributions import Outcome, Prepared
from coordinator.services.ingest_lookup import IngestCaller, lookup_many

REFUSED: Final = "refused"
ALONE: Final = "alone"
Result = Stored | str

MAX_BATCH = 64
T = TypeVar("T")


def store_batch(session: Session, items: list[Prepared]) -> list[Result]:
    """Store ``items`` in one transaction of ``session`` and commit; one result per item."""
    if not items:
        return []
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
        stored = charge.store_many(session.connection(), [items[i].release for i in order],
                                   [items[i].check for i in order])
        for i, one in zip(order, stored, strict=True):
            results[i] = REFUSED if one is None else one
        session.commit()
    except Exception:  # every item runs again alone, which reports its own error
        session.rollback()
        return [ALONE] * len(items)
    return results


def _lock_key(item: Prepared) -> tuple[str, int]:
    return item.release.study_id, item.release.participant_id


Read = Callable[[Session, IngestCaller | None], Outcome | Prepared]
Settle = Callable[[Session, Prepared, str], Outcome]


@dataclass
class Job:
    """One request: ``wanted`` (credential, study, idempotency key) to look up, ``read``
    (check the caller found, validate, decode), and ``settle`` for what the batch could not
    store (:data:`REFUSED` or :data:`ALONE`), in a transaction of its own."""

    wanted: tuple[str, str, str]
    read: Read
    settle: Settle
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Outcome]
    step: Outcome | Prepared | BaseException | None = None


class GroupWriter:
    """One per process: one thread runs the pending requests' work in batches, one commit each.

    A batch (all pending requests, at most :data:`MAX_BATCH`) runs in one session: every
    request's read (caller, replay, validation, decoding; an error answers that request
    only), then :func:`store_batch` for those that are ready, then each refused or
    left-alone release in its own transaction. The session's connection is checked out (and
    pinged) once a batch, not once a request. Requests arriving meanwhile form the next
    batch. Not bound to an event loop: each job carries its own.
    """

    def __init__(self, factory: sessionmaker[Session],
                 checkpointer: Checkpointer | None = None) -> None:
        self._factory = factory
        self._checkpointer = checkpointer
        self._lock = threading.Lock()
        self._pending: list[Job] = []
        self._busy = False
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="fedod-group-commit")

    async def run(self, wanted: tuple[str, str, str], read: Read, settle: Settle) -> Outcome:
        """Look up, ``read``, then store with whatever else is pending; the outcome once
        committed (or the error that answers this request)."""
        loop = asyncio.get_running_loop()
        job = Job(wanted, read, settle, loop, loop.create_future())
        with self._lock:
            self._pending.append(job)
            start, self._busy = not self._busy, True
        if start:
            self._thread.submit(self._drain)
        return await job.future

    @property
    def pending(self) -> int:
        """Requests waiting for the next batch."""
        with self._lock:
            return len(self._pending)

    def _drain(self) -> None:
        while True:
            with self._lock:
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                if not batch:
                    self._busy = False
                    return
            stored = 0
            try:
                with self._factory() as session:
                    stored = run_batch(session, batch)
            except BaseException as exc:  # e.g. no connection: answer every job still open
                for job in batch:
                    if not isinstance(job.step, Outcome | BaseException):
                        job.step = exc
            loops: dict[asyncio.AbstractEventLoop, list[Job]] = {}
            for job in batch:
                loops.setdefault(job.loop, []).append(job)
            for loop, jobs in loops.items():  # one wake-up of each loop for its answers
                with contextlib.suppress(RuntimeError):  # that loop is closed
                    loop.call_soon_threadsafe(_answer_all, jobs)
            if stored and self._checkpointer is not None:  # after the answers
                self._checkpointer.wrote(stored)


def run_batch(session: Session, batch: list[Job]) -> int:
    """The batch's lookups (one query), each job's read, the batch's one write transaction,
    then the stragglers alone; the characters of payload the batch's transaction stored."""
    found = _attempt(session, lambda: lookup_many(session.connection(execution_options=READ),
                                                  [job.wanted for job in batch]))
    for i, job in enumerate(batch):
        if isinstance(found, BaseException):
            job.step = found
            continue
        job.step = _attempt(session, functools.partial(job.read, session, found[i]))
    ready = [job for job in batch if isinstance(job.step, Prepared)]
    results = store_batch(session, [job.step for job in ready])  # type: ignore[misc]
    stored = 0
    for job, result in zip(ready, results, strict=True):
        prepared = job.step
        assert isinstance(prepared, Prepared)
        if isinstance(result, Stored):
            job.step = Outcome(result, replay=False)
            stored += len(prepared.release.lsh_payload) + len(prepared.release.grid_payload or "")
        else:
            job.step = _attempt(session, functools.partial(job.settle, session, prepared, result))
    return stored


def _attempt(session: Session, work: Callable[[], T]) -> T | BaseException:
    """``work()`` or its error (that request's answer); once more after a dropped connection
    (every step is safe to repeat: reads, and writes keyed by the idempotency key)."""
    for again in (True, False):
        try:
            return work()
        except Exception as exc:  # the session starts clean for the next step
            session.rollback()
            if not (again and isinstance(exc, DBAPIError) and exc.connection_invalidated):
                return exc
    raise AssertionError("unreachable")


def _answer_all(jobs: list[Job]) -> None:
    for job in jobs:
        _answer(job.future, job.step)


def _answer(future: asyncio.Future[Outcome], step: object) -> None:
    if future.done():  # the request was cancelled meanwhile
        return
    if isinstance(step, BaseException):
        future.set_exception(step)
    else:
        assert isinstance(step, Outcome)
        future.set_result(step)


_writers_lock = threading.Lock()


def writer_of(state: object) -> GroupWriter:
    """The process's writer kept on ``app.state`` (created on first use)."""
    writer = getattr(state, "group_writer", None)
    if writer is None:
        with _writers_lock:
            writer = getattr(state, "group_writer", None)
            if writer is None:
                writer = GroupWriter(state.sessionmaker,  # type: ignore[attr-defined]
                                     getattr(state, "checkpointer", None))
                state.group_writer = writer  # type: ignore[attr-defined]
    return writer
