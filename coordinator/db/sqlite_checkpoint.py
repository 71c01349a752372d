"""SQLite WAL checkpoints on a thread of their own, off the ingest writer's path.

In WAL mode a commit appends pages to the ``-wal`` file; a checkpoint copies them back into
the database file. SQLite's automatic checkpoint runs inside the COMMIT that crosses 1,000
pages, on the committing connection: for the coordinator that is the group-commit writer,
which then holds the writer lock (``coordinator.db.sqlite_lock``) while it reads and re-writes
every page of the last few megabytes. At 1,000 tables a release stores about 170 KB (42
pages), so a checkpoint ran every 24 or so releases, inside a batch's commit (BENCHMARKS.md,
2026-11-25).

Here the server counts the bytes its writer stores (:meth:`Checkpointer.wrote`) and, every
:data:`EVERY_BYTES`, wakes one thread that runs ``PRAGMA wal_checkpoint(PASSIVE)`` on its own
connection. A passive checkpoint takes no write lock: writers go on meanwhile, and frames
committed during it wait for the next one. Nothing about durability changes (a commit is
durable once its frames are in the WAL). SQLite's own automatic checkpoint stays as a
backstop at :data:`BACKSTOP_PAGES` (``coordinator.db.engine``), for other writers and for a
checkpoint thread that falls behind.
"""

from __future__ import annotations

import logging
import sqlite3
import threading

log = logging.getLogger("fedod.db")

EVERY_BYTES = 4 * 2**20
"""Bytes stored between two background checkpoints (SQLite's default: 1,000 pages of 4 KiB)."""
BACKSTOP_PAGES = 4000
"""``PRAGMA wal_autocheckpoint`` of every connection (16 MiB of 4 KiB pages)."""


class Checkpointer:
    """Passive WAL checkpoints of one database file, on a daemon thread started on first use."""

    def __init__(self, path: str, every_bytes: int = EVERY_BYTES, timeout_s: float = 30.0) -> None:
        self.path = path
        self.every_bytes = every_bytes
        self.timeout_s = timeout_s
        self.done = 0
        """Checkpoints run so far (whether or not they could copy every frame)."""
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._written = 0
        self._requested = 0  # thresholds crossed so far
        self._taken = 0  # of those, how many the running or last checkpoint started after
        self._covered = 0  # of those, how many a finished checkpoint started after
        self._thread: threading.Thread | None = None

    def wrote(self, n_bytes: int) -> None:
        """Count ``n_bytes`` committed; wake the checkpoint thread every ``every_bytes``."""
        with self._lock:
            self._written += n_bytes
            if self._written < self.every_bytes:
                return
            self._written = 0
            self._requested += 1
            if self._thread is None:
                thread = threading.Thread(target=self._run, daemon=True,
                                          name="fedod-wal-checkpoint")
                try:
                    thread.start()
                except RuntimeError as exc:  # no thread now: SQLite's backstop still runs
                    log.warning("cannot start the WAL checkpoint thread: %s", exc)
                    return
                self._thread = thread
            self._wake.notify_all()

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as exc:  # SQLite's backstop still runs; the next due write retries
            log.warning("cannot open %s for WAL checkpoints: %s", self.path, exc)
            with self._lock:
                self._thread = None
            return
        while True:
            with self._lock:
                self._wake.wait_for(lambda: self._requested > self._taken)
                self._taken = self._requested  # one checkpoint copies all committed so far
            try:
                busy, log_frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            except sqlite3.Error as exc:  # e.g. another process's checkpoint: the next one will do
                log.warning("background WAL checkpoint failed: %s", exc)
            else:
                log.debug("WAL checkpoint: %s of %s frames copied (busy=%s)", copied,
                          log_frames, busy)
            with self._lock:
                self.done += 1
                self._covered = self._taken
                self._wake.notify_all()

    def wait_caught_up(self, timeout_s: float, due: int = 0) -> bool:
        """Wait until at least ``due`` checkpoints were due and, after the last of them, one
        has run; False if ``timeout_s`` passed first."""
        with self._lock:
            return self._wake.wait_for(
                lambda: self._requested >= due and self._covered >= self._requested, timeout_s)
