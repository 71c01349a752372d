"""The contribution hot path: one read, the write transaction, and what changes between them.

The route reads the caller, study, membership and key once, then decodes the body, then
writes. These tests change the database *while the body is being decoded* (a hook on the
decoding step, i.e. on observed progress, never a timer) and check that the write still
refuses what the read could not know: a credential revoked meanwhile, a config re-signed
meanwhile. On both SQLite and PostgreSQL (whose write runs on the driver cursor).
"""

from __future__ import annotations

import pytest
from coordinator_kit import ADMIN
from sqlalchemy import bindparam, insert, select
from sqlalchemy.exc import IntegrityError

from coordinator.db import driver_sql
from coordinator.db.tables import Member, utcnow
from coordinator.services import contributions
from coordinator.services.participants import revoke_participant
from coordinator.services.studies import resign_all

URL = "/v1/studies/s1/contributions"


def during_decoding(monkeypatch, action):
    """Run ``action()`` once, after the route's read and before its write."""
    real = contributions.check_release
    calls = []

    def decode(*args, **kwargs):
        calls.append(action())
        return real(*args, **kwargs)

    monkeypatch.setattr(contributions, "check_release", decode)
    return calls


def spent(client, name="h1"):
    budget = {b["participant"]: b for b in client.get("/v1/admin/budget", headers=ADMIN).json()}
    return budget[name]["epsilon_spent"], len(budget[name]["entries"])


def test_credential_revoked_during_decoding_is_refused(
    client, app, h1, signed, coord_kit, rng, monkeypatch
):
    def revoke():
        with app.state.sessionmaker() as session:
            return revoke_participant(session, "h1").active

    calls = during_decoding(monkeypatch, revoke)
    body, _, _ = coord_kit.release(signed, rng)
    r = client.post(URL, json=body, headers=h1.headers)
    assert calls == [False]
    assert r.status_code == 401 and r.json()["detail"] == "participant 'h1' was revoked"
    assert spent(client) == ("0", 0)
    assert client.get("/v1/studies/s1/model", headers=ADMIN).json()["version"] == 0


def test_config_resigned_during_decoding_rolls_the_charge_back(
    client, app, h1, signed, coord_kit, rng, monkeypatch
):
    def resign():
        with app.state.sessionmaker() as session:
            return resign_all(session, app.state.keys)

    calls = during_decoding(monkeypatch, resign)
    body, _, _ = coord_kit.release(signed, rng)
    r = client.post(URL, json=body, headers=h1.headers)
    assert calls == [[("s1", 2)]]
    assert r.status_code == 409 and "not the current version 2" in r.json()["detail"]
    assert spent(client) == ("0", 0)
    model = client.get("/v1/studies/s1/model", headers=ADMIN).json()
    assert model["version"] == 0 and model["contributors"] == 0


def test_first_and_later_releases_count_one_contributor(client, h1, signed, coord_kit, rng):
    for version in (1, 2):  # the cap of 1 holds two releases of 0.5
        body, _, _ = coord_kit.release(signed, rng)
        r = client.post(URL, json=body, headers=h1.headers)
        assert r.status_code == 201 and r.json()["model_version"] == version, r.text
    model = client.get("/v1/studies/s1/model", headers=ADMIN).json()
    assert model["version"] == 2 and model["contributors"] == 1


MEMBERS = select(Member.participant_id).where(Member.study_id == bindparam("sid"))


def test_driver_errors_surface_as_sqlalchemy_errors_without_parameters(app, h1, signed):
    """A unique violation run on the driver cursor is SQLAlchemy's IntegrityError (the
    contribution path's replay race relies on it) and does not echo the parameters."""
    with app.state.sessionmaker() as session:
        conn = session.connection()
        [(pid,)] = driver_sql.fetch(conn, MEMBERS, {"sid": "s1"})
        with pytest.raises(IntegrityError) as caught:
            driver_sql.fetch(conn, insert(Member),
                             {"study_id": "s1", "participant_id": pid, "created_at": utcnow()})
        assert "parameters hidden" in str(caught.value)
        assert f"'s1', {pid}" not in str(caught.value)
