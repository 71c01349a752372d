"""SQLite's writer lock: one writing transaction at a time, handed over without sleeping.

SQLite lets one transaction write at a time and makes the others retry in its busy handler,
which sleeps 1, 2, 5, 10 ... ms between tries: two workers' millisecond transactions then
waited longer than they ran. Here a connection takes a lock before ``BEGIN IMMEDIATE``
and drops it when the transaction ends: first its process's gate (a ``threading.Lock`` per
database file; waiting threads sleep in the kernel and the next one wakes at the release),
then an exclusive ``flock`` on ``<database>-writer.lock`` against the other processes, polled
with pauses growing from 50 us to 1 ms (one thread per process polls). Both waits together
last at most the busy timeout, then "database is locked", as SQLite would say. The kernel
drops the ``flock`` of a process that dies. SQLite's own locking still guards correctness;
these locks only order the writers.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time

from sqlalchemy.exc import DBAPIError, OperationalError

_gates: dict[str, threading.Lock] = {}
_gates_lock = threading.Lock()


def _gate(path: str) -> threading.Lock:
    with _gates_lock:
        return _gates.setdefault(path, threading.Lock())


def _locked() -> OperationalError:
    return OperationalError("BEGIN IMMEDIATE", None,
                            sqlite3.OperationalError("database is locked (writer lock)"))


def sqlite_writer_lock(database: str | None, timeout_s: float) -> type[sqlite3.Connection]:
    """A ``sqlite3.Connection`` class (the ``factory`` of ``sqlite3.connect``) whose ``begin``
    takes the writer lock and runs ``BEGIN IMMEDIATE``, or for a read-only transaction a
    deferred ``BEGIN`` (in WAL mode a snapshot that takes no lock); ``commit``, ``rollback``
    and ``close`` drop it. Errors are raised as SQLAlchemy's. ``database`` is the file
    (``db.sqlite_file``); None (in memory, a URI: one process) takes no lock."""
    path = None if database is None else os.path.abspath(f"{database}-writer.lock")
    gate = None if path is None else _gate(path)

    class WriterLocked(sqlite3.Connection):
        _fd: int | None = None
        _held = False

        def begin(self, write: bool) -> None:
            if write:
                self._take()
            try:
                self.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.Error as exc:
                self._drop()
                raise DBAPIError.instance("BEGIN", None, exc, sqlite3.Error,
                                          hide_parameters=True) from exc

        def _take(self) -> None:
            if path is None or gate is None:
                return
            deadline = time.monotonic() + timeout_s
            if not gate.acquire(timeout=timeout_s):
                raise _locked()
            try:
                if self._fd is None:
                    self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
                pause = 5e-5
                while True:
                    try:
                        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            raise _locked() from None
                        time.sleep(pause)
                        pause = min(2 * pause, 1e-3)
            except BaseException:
                gate.release()
                raise
            self._held = True

        def _drop(self) -> None:
            if self._held and gate is not None and self._fd is not None:
                self._held = False
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                gate.release()

        def commit(self) -> None:
            try:
                super().commit()
            finally:
                self._drop()

        def rollback(self) -> None:
            try:
                super().rollback()
            finally:
                self._drop()

        def close(self) -> None:
            try:
                super().close()  # rolls back an open transaction
            finally:
                self._drop()
                if self._fd is not None:
                    os.close(self._fd)
                    self._fd = None

    return WriterLocked
