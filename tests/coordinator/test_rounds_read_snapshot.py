"""The reads a cohort polls run in a read snapshot (``deps.ReadSessionDep``): on SQLite they take
no writer lock, so a round's many ``GET .../rounds/current`` do not queue one at a time behind
each other and behind every write (a cohort of fifty on a loaded machine once waited out its
patience there). Here the test itself holds ``<database>-writer.lock``: the polled reads still
answer, and a write still waits for the lock (and gives up at the busy timeout with a 503).
The admin's and the dashboard's reads (budgets, lists, ``/me``, cohorts, the HTML pages) take
the same snapshot: a dashboard left open on a busy coordinator does not queue behind ingest."""

from __future__ import annotations

import fcntl
import os
import re
from contextlib import contextmanager

import pytest
from coordinator_kit import ADMIN, ADMIN_TOKEN

from coordinator.dashboard import session as admin_session
from coordinator.db.engine import sqlite_file


@pytest.fixture
def db_url(tmp_path):  # SQLite only: the writer lock is SQLite's
    return f"sqlite:///{tmp_path / 'coordinator.db'}"


@pytest.fixture
def settings(settings):
    return settings.model_copy(update={"sqlite_busy_timeout_ms": 200})


@contextmanager
def writer_lock_held(db_url: str):
    """Hold the coordinator's SQLite writer lock from another open file (flock is per open
    file, so this conflicts with the app's own descriptor in this process)."""
    path = os.path.abspath(f"{sqlite_file(db_url)}-writer.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def test_polled_reads_answer_while_another_writer_holds_the_lock(client, cohort, db_url):
    env, hospitals = cohort()
    assert client.post("/v1/studies/sec/rounds", headers=ADMIN).status_code == 201
    for h in hospitals:
        h.send("keys", h.state(), h.advert(h.state()))
    with writer_lock_held(db_url):
        for h in hospitals:  # phase masking: the roster and the neighbours' adverts
            st = h.state()
            assert st.status == "masking" and st.roster is not None
        for path in ("/v1/studies/sec/rounds", "/v1/studies/sec/membership"):
            assert client.get(path, headers=hospitals[0].e.headers if "member" in path
                              else ADMIN).status_code == 200
        blocked = client.post("/v1/participants", json={"name": "late", "epsilon_cap": "1"},
                              headers=ADMIN)
        assert blocked.status_code == 503, blocked.text  # a write still waits for the lock
    late = client.post("/v1/participants", json={"name": "late", "epsilon_cap": "1"},
                       headers=ADMIN)
    assert late.status_code == 201, late.text
    for h in hospitals:  # the round goes on as usual
        h.send("masked", h.state(), h.masked(h.state(), env))
    assert hospitals[0].state().status == "unmask"


def test_admin_and_dashboard_reads_answer_while_another_writer_holds_the_lock(
        client, make_participant, make_study, db_url):
    h1 = make_participant("h1")
    make_study("s1", members=[h1])
    login = client.post("/admin/login", data={"token": ADMIN_TOKEN}, follow_redirects=False)
    assert login.status_code == 303, login.text
    client.cookies.set(admin_session.COOKIE_NAME, login.cookies[admin_session.COOKIE_NAME])
    reads = [("/v1/admin/budget", ADMIN), ("/v1/participants", ADMIN), ("/v1/studies", ADMIN),
             ("/v1/me", h1.headers), ("/v1/studies/s1/cohorts", ADMIN), ("/admin", {}),
             ("/admin/participants/h1", {}), ("/admin/studies/s1", {}),
             ("/admin/studies/s1/cohorts", {})]
    def answer(path: str, headers: dict[str, str]) -> tuple[int, str]:
        r = client.get(path, headers=headers, follow_redirects=False)
        return r.status_code, re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", "<now>", r.text)

    before = {path: answer(path, h) for path, h in reads}
    assert before["/v1/studies/s1/cohorts"][0] == 409  # no cohorts section: still an answer
    assert all(code in (200, 409) for code, _ in before.values()), before
    assert "h1" in before["/admin"][1] and "<now>" in before["/admin"][1]  # the page's clock
    with writer_lock_held(db_url):
        for path, headers in reads:
            assert answer(path, headers) == before[path], path
        blocked = client.post("/v1/participants", json={"name": "late", "epsilon_cap": "1"},
                              headers=ADMIN)
        assert blocked.status_code == 503, blocked.text  # the lock is really held
