"""WAL checkpoints on a thread of their own (``coordinator.db.sqlite_checkpoint``).

In WAL mode a commit leaves its pages in ``<db>-wal``; only a checkpoint copies them into the
database file, so the file's size shows whether one ran. Waits are on the checkpoint count
(``Checkpointer.wait_caught_up``), never on a timer.
"""

from __future__ import annotations

import os
import time

import pytest
from coordinator_kit import ADMIN
from sqlalchemy import text

from coordinator.db.engine import make_engine
from coordinator.db.sqlite_checkpoint import BACKSTOP_PAGES, Checkpointer

ROW = "x" * 100_000


@pytest.fixture
def sqlite_db(tmp_path):
    path = tmp_path / "c.db"
    engine = make_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, payload TEXT)"))
    yield engine, str(path)
    engine.dispose()


def write_rows(engine, n: int) -> int:
    with engine.begin() as conn:
        for _ in range(n):
            conn.execute(text("INSERT INTO t (payload) VALUES (:p)"), {"p": ROW})
    return n * len(ROW)


def test_connections_keep_sqlites_own_checkpoint_only_as_a_backstop(sqlite_db):
    engine, _ = sqlite_db
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA wal_autocheckpoint")).scalar() == BACKSTOP_PAGES


def test_a_checkpoint_runs_once_enough_bytes_were_written(sqlite_db):
    engine, path = sqlite_db
    checkpointer = Checkpointer(path, every_bytes=1_000_000)
    written = write_rows(engine, 5)  # 500 KB: under the backstop and under every_bytes
    before = os.path.getsize(path)
    checkpointer.wrote(written)
    assert checkpointer.done == 0 and checkpointer._thread is None  # nothing started
    assert os.path.getsize(path) == before  # the rows are still only in the WAL
    checkpointer.wrote(write_rows(engine, 6))  # 1.1 MB in all: due
    assert checkpointer.wait_caught_up(timeout_s=120)
    assert checkpointer.done == 1
    assert os.path.getsize(path) >= before + 11 * len(ROW)  # every row copied into the file
    with engine.connect() as conn:  # and readable as before
        assert conn.execute(text("SELECT count(*) FROM t")).scalar() == 11


def test_every_due_write_is_followed_by_a_checkpoint_that_copies_it(sqlite_db):
    engine, path = sqlite_db
    checkpointer = Checkpointer(path, every_bytes=len(ROW))
    for _ in range(4):  # due each time; those that arrive while one runs share the next
        checkpointer.wrote(write_rows(engine, 1))
    checkpointer.wrote(write_rows(engine, 3))
    assert checkpointer.wait_caught_up(timeout_s=120)
    assert 1 <= checkpointer.done <= 5
    assert os.path.getsize(path) >= 7 * len(ROW)


def test_the_ingest_writer_reports_what_it_stored(client, app, make_participant, make_study,
                                                   coord_kit, rng):
    settings = app.state.settings
    if not settings.resolved_database_url.startswith("sqlite:///"):
        assert app.state.checkpointer is None  # PostgreSQL checkpoints on its own
        return
    path = app.state.checkpointer.path
    app.state.checkpointer = Checkpointer(path, every_bytes=1)  # any stored release is due
    p = make_participant("h1")
    signed = make_study("s1", members=[p])
    before = os.path.getsize(path)
    body = coord_kit.release(signed, rng)[0]
    r = client.post("/v1/studies/s1/contributions", json=body, headers=p.headers)
    assert r.status_code == 201, r.text
    assert app.state.checkpointer.wait_caught_up(timeout_s=120, due=1)  # told after the answer
    assert app.state.checkpointer.done >= 1
    assert os.path.getsize(path) > before
    assert client.get("/v1/studies/s1/model", headers=ADMIN).status_code == 200


def test_a_database_it_cannot_open_is_logged_and_retried_on_the_next_due_write(tmp_path, caplog):
    checkpointer = Checkpointer(str(tmp_path / "missing" / "c.db"), every_bytes=1)
    checkpointer.wrote(1)
    thread = checkpointer._thread
    assert thread is not None
    thread.join(timeout=120)
    assert not thread.is_alive() and checkpointer._thread is None and checkpointer.done == 0
    assert "cannot open" in caplog.text
    checkpointer.wrote(1)  # due again: a new thread tries again, and logs again
    for _ in range(12_000):  # waits for the second warning (a bound, not a timing)
        if caplog.text.count("cannot open") == 2:
            break
        time.sleep(0.01)
    assert caplog.text.count("cannot open") == 2
