"""Database engine and sessions.

SQLite (the zero-set-up default) runs every transaction as ``BEGIN IMMEDIATE``: one writer at a
time across all worker processes, the others wait up to the busy timeout, in the order of
``coordinator.db.sqlite_lock`` (a writer lock taken before ``BEGIN IMMEDIATE``; SQLite's own
busy handler sleeps milliseconds between retries). A read-only transaction (:data:`READ`)
begins deferred and takes no lock. PostgreSQL runs at READ COMMITTED and the contribution
path takes row locks (``SELECT ... FOR UPDATE``).

Every engine hides SQL parameters in its errors (they include credential hashes). A PostgreSQL
pool is bounded (``FEDOD_DB_POOL_SIZE`` + ``FEDOD_DB_MAX_OVERFLOW`` per worker) and waits at most
``FEDOD_DB_TIMEOUT_S`` for a connection; ``check_connection_budget`` refuses to start workers
whose pools together exceed what the server allows.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from coordinator.db.sqlite_checkpoint import BACKSTOP_PAGES
from coordinator.db.sqlite_lock import sqlite_writer_lock


@dataclass(frozen=True)
class PoolLimits:
    """Connection limits of one worker's engine."""

    size: int = 5
    overflow: int = 0
    timeout_s: float = 5.0


def sqlite_file(url: str) -> str | None:
    """The database file of a SQLite URL; None for another database, in memory or for a
    ``file:`` URI (one process, no file of ours to create, lock or checkpoint)."""
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database:
        return None
    if database == ":memory:" or database.startswith("file:"):
        return None
    return database


def create_sqlite_file(url: str) -> None:
    """Create the SQLite file owner-only (0600) before SQLite creates it world-readable."""
    database = sqlite_file(url)
    if database is None:
        return
    fd = os.open(database, os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)


def make_engine(
    url: str, *, busy_timeout_ms: int = 30_000, limits: PoolLimits | None = None
) -> Engine:
    """Create an engine; SQLite gets WAL, foreign keys, a busy timeout and BEGIN IMMEDIATE."""
    limits = limits or PoolLimits()
    if not url.startswith("sqlite"):
        engine = create_engine(
            url,
            hide_parameters=True,
            pool_size=limits.size,
            max_overflow=limits.overflow,
            pool_timeout=limits.timeout_s,
            connect_args=_connect_args(url, limits.timeout_s),
        )
        ping_idle_connections(engine)
        return engine
    create_sqlite_file(url)
    engine = create_engine(
        url,
        hide_parameters=True,
        connect_args={"timeout": busy_timeout_ms / 1000, "check_same_thread": False,
                      "factory": sqlite_writer_lock(sqlite_file(url), busy_timeout_ms / 1000)},
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):  # type: ignore[no-untyped-def]
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        cursor.execute("PRAGMA foreign_keys = ON")
        if ":memory:" not in url:
            cursor.execute("PRAGMA journal_mode = WAL")
            # the server checkpoints on a thread of its own (coordinator.db.sqlite_checkpoint)
            cursor.execute(f"PRAGMA wal_autocheckpoint = {BACKSTOP_PAGES}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):  # type: ignore[no-untyped-def]
        conn.connection.dbapi_connection.begin(write=not conn.get_execution_options().get(
            READ_ONLY))

    return engine


READ_ONLY = "fedod_read_only"
READ = {READ_ONLY: True}
"""``session.connection(execution_options=READ)``: on SQLite a deferred ``BEGIN`` (a read
snapshot that takes neither the writer lock nor SQLite's write lock), for a transaction that
only reads; other databases ignore it."""


IDLE_PING_S = 1.0


def ping_idle_connections(engine: Engine, idle_s: float = IDLE_PING_S) -> None:
    """Ping a pooled connection on checkout only if it sat idle in the pool over ``idle_s``.

    ``pool_pre_ping`` pings on every checkout: a network round trip per request on the hot
    paths. A connection checked in less than ``idle_s`` ago was just used successfully; one
    that idled (where a database restart or an idle timeout drops connections) is pinged, and
    replaced if the ping fails. A connection that drops while in use fails its statement;
    SQLAlchemy then invalidates the pool, and the ingest writer retries such a step once.
    """

    @event.listens_for(engine, "checkin")
    def _checkin(_dbapi_connection, record):  # type: ignore[no-untyped-def]
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection, record, _proxy):  # type: ignore[no-untyped-def]
        since = record.info.get("idle_since")
        if since is None or time.monotonic() - since < idle_s:
            return  # a new connection, or one in steady use
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            raise DisconnectionError("idle connection failed its ping") from exc
        if not alive:
            raise DisconnectionError("idle connection failed its ping")


def _connect_args(url: str, timeout_s: float) -> dict[str, object]:
    """libpq's connect timeout (whole seconds, at least 2) for PostgreSQL URLs."""
    if url.startswith("postgresql"):
        return {"connect_timeout": max(2, math.ceil(timeout_s))}
    return {}


def make_probe_engine(url: str, timeout_s: float) -> Engine:
    """A pool-less engine for the readiness probe: one short connection per check."""
    if url.startswith("sqlite"):
        return make_engine(url)
    return create_engine(
        url, hide_parameters=True, poolclass=NullPool, connect_args=_connect_args(url, timeout_s)
    )


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    """Sessions that keep loaded attributes after commit (responses are built afterwards)."""
    return sessionmaker(engine, expire_on_commit=False)


def is_sqlite(engine: Engine) -> bool:
    """True for the SQLite dialect (single writer, no row locks)."""
    return engine.dialect.name == "sqlite"


def ping(engine: Engine) -> None:
    """Raise if the database cannot answer ``SELECT 1``."""
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))


def check_connection_budget(url: str, workers: int, per_worker: int, reserved: int) -> str:
    """Refuse (``ValueError``) workers whose connections exceed what PostgreSQL allows.

    Allowed is ``max_connections - superuser_reserved_connections - reserved``; returns a
    one-line summary for the startup output. SQLite has no connection limit.
    """
    if url.startswith("sqlite"):
        return "database: SQLite file (no connection limit)"
    engine = create_engine(url, hide_parameters=True, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            max_conn = int(conn.execute(text("SHOW max_connections")).scalar_one())
            su = int(conn.execute(text("SHOW superuser_reserved_connections")).scalar_one())
    finally:
        engine.dispose()
    allowed = max_conn - su - reserved
    needed = workers * per_worker
    summary = (
        f"{workers} worker(s) x {per_worker} connections = {needed}; PostgreSQL allows "
        f"{allowed} (max_connections {max_conn} - {su} superuser-reserved - {reserved} "
        "FEDOD_DB_RESERVED_CONNECTIONS)"
    )
    if needed > allowed:
        raise ValueError(
            f"too many database connections: {summary}; lower --workers, FEDOD_DB_POOL_SIZE "
            "or FEDOD_DB_MAX_OVERFLOW, or raise max_connections on the server"
        )
    return "database connections: " + summary


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session whose transaction commits on success and rolls back on any error."""
    with factory() as session, session.begin():
        yield session
