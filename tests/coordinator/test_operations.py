"""Health, readiness, metrics, key, OpenAPI, settings validation and the dashboard over HTTP."""

from __future__ import annotations

import pytest
from coordinator_kit import ADMIN, ADMIN_TOKEN
from pydantic import ValidationError

from coordinator.config import Settings
from coordinator.dashboard import session as admin_session


def test_health_ready_metrics_key_docs(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}
    client.get("/v1/key")
    assert client.get("/metrics").status_code == 401
    metrics = client.get("/metrics", headers=ADMIN)
    assert metrics.status_code == 200 and "fedod_http_requests_total" in metrics.text
    key = client.get("/v1/key").json()
    assert key["key_id"].startswith("sha256:") and "PUBLIC KEY" in key["public_key_pem"]
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert "/v1/studies/{study_id}/contributions" in paths and "/admin" not in paths


def test_readyz_and_api_are_503_when_the_database_is_gone(client, app):
    from coordinator.db.engine import make_engine, make_probe_engine, make_sessionmaker

    gone = "postgresql+psycopg://nobody@127.0.0.1:1/none"
    app.state.engine.dispose()
    app.state.engine = make_engine(gone)
    app.state.sessionmaker = make_sessionmaker(app.state.engine)
    app.state.probe_engine = make_probe_engine(gone, 2)
    r = client.get("/readyz")
    assert r.status_code == 503 and r.json()["detail"].startswith("database unreachable")
    assert r.headers["retry-after"] == "5"
    r = client.get("/v1/admin/budget", headers=ADMIN)
    assert r.status_code == 503 and r.headers["retry-after"] == "5", r.text
    assert "retry later" in r.json()["detail"]


@pytest.mark.parametrize("token", ["changeme", "short-token", "admin", "a" * 24, "ab" * 16])
def test_weak_admin_token_is_refused_outside_development(token):
    with pytest.raises(ValidationError, match="FEDOD_ADMIN_TOKEN is a placeholder, shorter"):
        Settings(admin_token=token)
    assert Settings(admin_token=token, env="development").admin_token == token


def test_settings_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("FEDOD_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("FEDOD_MAX_BODY_BYTES", "4096")
    s = Settings()
    assert s.max_body_bytes == 4096
    assert s.resolved_database_url == f"sqlite:///{tmp_path.resolve() / 'coordinator.db'}"
    assert s.resolved_signing_key_path == tmp_path / "signing_key.pem"


def test_signing_key_is_owner_only(app, settings):
    path = settings.resolved_signing_key_path
    assert path.exists() and path.stat().st_mode & 0o077 == 0


def test_dashboard_needs_login(client):
    r = client.get("/admin", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/admin/login"
    r = client.post("/admin/login", data={"token": "wrong"})
    assert r.status_code == 401 and "That is not the admin token." in r.text
    r = client.get("/admin", headers={"Cookie": f"{admin_session.COOKIE_NAME}=1.forged"},
                   follow_redirects=False)
    assert r.status_code == 303


def test_dashboard_login_sets_strict_httponly_cookie(client, make_participant, make_study,
                                                      coord_kit, rng):
    h1 = make_participant("h1", epsilon_cap="2")
    signed = make_study("s1", members=[h1])
    body, _, _ = coord_kit.release(signed, rng)
    client.post("/v1/studies/s1/contributions", json=body, headers=h1.headers)
    r = client.post("/admin/login", data={"token": ADMIN_TOKEN}, follow_redirects=False)
    assert r.status_code == 303
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and ADMIN_TOKEN not in cookie
    page = client.get("/admin")
    assert page.status_code == 200 and "default-src 'none'" in page.headers[
        "content-security-policy"]
    assert 'data-field="epsilon_spent">0.5<' in page.text
    assert 'data-field="epsilon_remaining">1.5<' in page.text
    assert "<script" not in page.text and "http" not in page.text.split("</style>")[0]
    r = client.post("/admin/logout", follow_redirects=False)
    assert r.status_code == 303
    assert client.get("/admin", follow_redirects=False).status_code == 303


def test_admin_budget_lists_every_participant(client, make_participant):
    make_participant("b"), make_participant("a")
    names = [b["participant"] for b in client.get("/v1/admin/budget", headers=ADMIN).json()]
    assert names == ["a", "b"]
