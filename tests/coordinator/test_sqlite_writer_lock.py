"""SQLite's writer lock: ``<database>-writer.lock`` is held from BEGIN IMMEDIATE to the end of
the transaction, by every engine on the file (in this process or another), and a deferred
read transaction (``db.READ``) does not take it."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from coordinator.db.engine import READ, make_engine


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'c.db'}"


def test_a_second_writer_waits_for_the_first_and_gives_up_at_the_busy_timeout(url: str) -> None:
    first, second = make_engine(url), make_engine(url, busy_timeout_ms=0)
    with first.connect() as a:
        a.begin()
        a.execute(text("CREATE TABLE t (x INTEGER)"))
        with second.connect() as b, pytest.raises(OperationalError, match="writer lock"):
            b.begin()
        a.commit()
    with second.begin() as b:  # released by the commit
        b.execute(text("INSERT INTO t VALUES (1)"))
    mode = stat.S_IMODE(os.stat(url.removeprefix("sqlite:///") + "-writer.lock").st_mode)
    assert mode == 0o600


@pytest.mark.parametrize("end", ["rollback", "close"])
def test_every_end_of_a_transaction_releases_the_lock(url: str, end: str) -> None:
    first, second = make_engine(url), make_engine(url, busy_timeout_ms=0)
    a = first.connect()
    a.begin()
    if end == "rollback":
        a.rollback()
    a.close()  # back to the pool, still open
    with second.begin() as b:
        b.execute(text("SELECT 1"))
    first.dispose()


def test_a_failed_begin_releases_the_lock(url: str) -> None:
    """A writer outside fedod (no writer lock) holds SQLite's lock: BEGIN IMMEDIATE fails at
    the busy timeout, and the writer lock it took is dropped."""
    engine, other = make_engine(url, busy_timeout_ms=0), make_engine(url, busy_timeout_ms=0)
    a, b = engine.connect(), other.connect()  # connected (WAL set) before the foreign lock
    foreign = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
    foreign.execute("BEGIN IMMEDIATE")
    with pytest.raises(OperationalError, match="database is locked"):
        a.begin()
    foreign.execute("COMMIT")
    foreign.close()
    with b.begin():  # neither lock is held any more
        b.execute(text("SELECT 1"))
    a.close()
    b.close()


def test_a_read_transaction_takes_no_lock(url: str) -> None:
    writer, reader = make_engine(url), make_engine(url, busy_timeout_ms=0)
    with writer.begin() as w:
        w.execute(text("CREATE TABLE t (x INTEGER)"))
        w.execute(text("INSERT INTO t VALUES (1)"))
    with writer.connect() as w:
        w.begin()
        w.execute(text("INSERT INTO t VALUES (2)"))
        with reader.connect().execution_options(**READ) as r:
            r.begin()
            assert r.execute(text("SELECT count(*) FROM t")).scalar_one() == 1  # snapshot
            r.rollback()
        w.commit()


def test_another_process_holding_the_lock_is_waited_for(url: str, tmp_path: Path) -> None:
    """A process that holds the lock (its transaction open) blocks this one until it ends."""
    ready, go = tmp_path / "ready", tmp_path / "go"
    holder = subprocess.Popen([sys.executable, "-c", f"""
import pathlib, time
from sqlalchemy import text
from coordinator.db.engine import make_engine
with make_engine({url!r}).connect() as c:
    c.begin()
    c.execute(text("CREATE TABLE t (x INTEGER)"))
    pathlib.Path({str(ready)!r}).touch()
    while not pathlib.Path({str(go)!r}).exists():
        time.sleep(0.01)
    c.commit()
"""])
    try:
        while not ready.exists():
            assert holder.poll() is None, "the lock holder exited"
            time.sleep(0.01)
        with make_engine(url, busy_timeout_ms=0).connect() as b, \
                pytest.raises(OperationalError, match="writer lock"):
            b.begin()
        go.touch()
        with make_engine(url).begin() as b:  # waits (up to 30 s) for the holder's commit
            b.execute(text("INSERT INTO t VALUES (1)"))
        assert holder.wait() == 0
    finally:
        holder.kill()
