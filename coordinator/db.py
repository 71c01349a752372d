"""Database engine and sessions.

SQLite (the zero-set-up default) runs every transaction as ``BEGIN IMMEDIATE``: one writer at a
time across all worker processes, the others wait up to the busy timeout. PostgreSQL runs at
READ COMMITTED and the contribution path takes row locks (``SELECT ... FOR UPDATE``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.orm import Session, sessionmaker


def make_engine(url: str, *, busy_timeout_ms: int = 30_000) -> Engine:
    """Create an engine; SQLite gets WAL, foreign keys, a busy timeout and BEGIN IMMEDIATE."""
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
    engine = create_engine(
        url, connect_args={"timeout": busy_timeout_ms / 1000, "check_same_thread": False}
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):  # type: ignore[no-untyped-def]
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        cursor.execute("PRAGMA foreign_keys = ON")
        if ":memory:" not in url:
            cursor.execute("PRAGMA journal_mode = WAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):  # type: ignore[no-untyped-def]
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


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


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session whose transaction commits on success and rolls back on any error."""
    with factory() as session, session.begin():
        yield session
