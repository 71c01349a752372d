"""Hardening over HTTP and in units: sessions, throttling, labels, logs, races, secrets, files."""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from coordinator_kit import ADMIN, ADMIN_TOKEN

from common.errors import Conflict
from coordinator.config import Settings, describe_settings_error
from coordinator.dashboard import session as admin_session
from coordinator.dashboard.login_throttle import judge_login
from coordinator.db.engine import check_connection_budget, make_engine, make_sessionmaker
from coordinator.metrics import method_label, remove_stale_dirs
from coordinator.reclaim import Reclaimer


def login(client):
    r = client.post("/admin/login", data={"token": ADMIN_TOKEN}, follow_redirects=False)
    assert r.status_code == 303, r.text
    return r.cookies[admin_session.COOKIE_NAME]


def test_logout_invalidates_a_copied_cookie(client):
    cookie = login(client)
    assert ADMIN_TOKEN not in cookie
    client.cookies.clear()
    copy = {admin_session.COOKIE_NAME: cookie}
    client.cookies.update(copy)
    assert client.get("/admin", follow_redirects=False).status_code == 200
    assert client.post("/admin/logout", follow_redirects=False).status_code == 303
    client.cookies.update(copy)  # the attacker's copy, replayed after sign-out
    assert client.get("/admin", follow_redirects=False).status_code == 303


def test_failed_logins_are_throttled_per_client(client, settings):
    for _ in range(settings.login_attempts_per_minute):
        assert client.post("/admin/login", data={"token": "wrong"}).status_code == 401
    r = client.post("/admin/login", data={"token": ADMIN_TOKEN})
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert "Too many failed attempts" in r.text


def test_throttle_window_slides(app):
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def judge(client, seconds, correct=False):
        with app.state.sessionmaker() as session:
            return judge_login(session, client, correct=correct, limit=3, window_s=60,
                               now=t0 + timedelta(seconds=seconds))

    assert [judge("a", s) for s in (0, 10, 20)] == [0, 0, 0]
    assert judge("a", 30, correct=True) == 31  # throttled even with the right token
    assert judge("b", 30) == 0  # per client address
    assert judge("a", 59) == 2 and judge("a", 60) == 0  # the failure at 0 left the window
    assert judge("a", 61) == 10  # 10, 20 and 60 are in it now; 10 leaves it at 70


def test_made_up_methods_do_not_create_series(client):
    for i in range(30):
        client.request(f"X{i}", "/v1/key")
    text = client.get("/metrics", headers=ADMIN).text
    assert 'method="other"' in text and 'method="X1"' not in text
    assert method_label("GET") == "GET" and method_label("FOO") == "other"


def test_access_line_reads_method_path_status_duration_client(client, caplog):
    with caplog.at_level(logging.INFO, logger="fedod.access"):
        client.get("/v1/key")
        client.get("/v1/admin/budget", headers={"Authorization": "Bearer nope"})
    ok, refused = [r for r in caplog.records if r.name == "fedod.access"][-2:]
    assert ok.levelno == logging.INFO and ok.getMessage().startswith("GET /v1/key 200 ")
    assert ok.getMessage().endswith("ms client=testclient")
    assert refused.levelno == logging.WARNING and " 401 " in refused.getMessage()


def test_metrics_can_be_made_public(settings):
    from fastapi.testclient import TestClient

    from coordinator.main import create_app

    app = create_app(settings.model_copy(update={"metrics_public": True}))
    with TestClient(app) as c:
        assert c.get("/metrics").status_code == 200
    app.state.engine.dispose()


def race(n, make):
    """Run ``make()`` in ``n`` threads released together; return results or exceptions."""
    barrier, out = threading.Barrier(n), []

    def run():
        barrier.wait()
        try:
            out.append(make())
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            out.append(exc)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.mark.postgres
@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)  # SQLite serialises writers
def test_concurrent_creation_answers_conflict_not_500(app, coord_kit):
    from common.budget import PrivacyBudget
    from common.wire.schemas import StudyCreate
    from coordinator.services.participants import create_participant
    from coordinator.services.studies import add_member, create_study

    factory = app.state.sessionmaker

    def participant():
        with factory() as s:
            return create_participant(s, "same", PrivacyBudget("1"))[0].name

    def study():
        with factory() as s:
            return create_study(s, app.state.keys,
                                StudyCreate.model_validate(coord_kit.study_spec("same"))).id

    def member():
        with factory() as s:
            add_member(s, "same", "same")
            return "member"

    for make in (participant, study, member):
        out = race(8, make)
        errors = [o for o in out if isinstance(o, Exception)]
        assert all(isinstance(e, Conflict) for e in errors), errors
        assert len(out) - len(errors) == (8 if make is member else 1)


def test_rejected_token_is_not_echoed(monkeypatch):
    secret = "q" * 30
    with pytest.raises(Exception) as info:
        Settings(admin_token=secret)
    assert secret not in describe_settings_error(info.value)
    env = {**os.environ, "FEDOD_ADMIN_TOKEN": secret, "FEDOD_ENV": "production"}
    out = subprocess.run([sys.executable, "-m", "coordinator.cli.main", "serve"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 3 and "too regular" in out.stderr
    assert secret not in out.stderr + out.stdout


def test_database_errors_hide_parameters(db_url):
    engine = make_engine(db_url)
    with pytest.raises(sa.exc.DBAPIError) as info, engine.connect() as conn:
        conn.execute(sa.text("SELECT * FROM no_such_table WHERE x = :h"),
                     {"h": "secret-token-hash"})
    engine.dispose()
    assert "secret-token-hash" not in str(info.value)


def test_sqlite_file_is_owner_only(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'c.db'}")
    with make_sessionmaker(engine)() as s:
        s.execute(sa.text("CREATE TABLE t (x int)"))
    engine.dispose()
    assert stat.S_IMODE((tmp_path / "c.db").stat().st_mode) == 0o600


def test_stale_metrics_dirs_are_removed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / f"prometheus-{dead.pid}").mkdir()
    (tmp_path / f"prometheus-{os.getpid()}").mkdir()
    assert remove_stale_dirs(tmp_path) == [tmp_path / f"prometheus-{dead.pid}"]
    assert (tmp_path / f"prometheus-{os.getpid()}").exists()


@pytest.mark.postgres
def test_connection_budget_refuses_pools_past_max_connections(postgres_url):
    assert "PostgreSQL allows" in check_connection_budget(postgres_url, 4, 6, 10)
    with pytest.raises(ValueError, match="too many database connections: 4 worker"):
        check_connection_budget(postgres_url, 4, 31, 10)


def test_serve_refuses_a_concurrency_limit_past_the_open_files_limit():
    import resource

    from coordinator.server import raise_file_limit

    limit = raise_file_limit(64)
    assert limit == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if limit != resource.RLIM_INFINITY:
        with pytest.raises(ValueError, match="FEDOD_LIMIT_CONCURRENCY needs about"):
            raise_file_limit(limit + 1)


def test_reclaimer_coalesces_dropped_bodies(caplog):
    async def drop_bodies():
        reclaimer = Reclaimer(min_interval_s=3600)
        for _ in range(3):  # three bodies dropped before the loop turns: one run for all
            reclaimer.request()
        while reclaimer._pending:
            await asyncio.sleep(0)
        reclaimer.request()  # inside the interval: waits for its end instead of running now
        return reclaimer

    with caplog.at_level(logging.INFO, logger="fedod.reclaim"):
        reclaimer = asyncio.run(drop_bodies())
    runs = [r for r in caplog.records if r.name == "fedod.reclaim"]
    assert [r.getMessage() for r in runs] == [
        "freed the memory of 3 dropped request bodies (3 so far)"]
    assert reclaimer.dropped == 4 and reclaimer._pending
