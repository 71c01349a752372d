"""Studies, members, configs, participants, caps, budgets: status and detail per outcome."""

from __future__ import annotations

import pytest
from coordinator_kit import ADMIN

from common.study.signing import SignedConfig, public_key_from_pem, verify_config


def test_study_config_is_signed_by_the_served_key(client, make_study, coord_kit):
    signed = make_study("s1")
    key = client.get("/v1/key").json()
    config = verify_config(SignedConfig(**signed), public_key_from_pem(key["public_key_pem"]))
    assert config.version == 1 and config.lsh.n_tables == 5 and len(config.lsh.seed) == 64
    assert signed["key_id"] == key["key_id"]
    other = make_study("s2")
    assert coord_kit.config_of(other).lsh.seed != config.lsh.seed


@pytest.mark.parametrize(
    ("headers", "status", "detail"),
    [({}, 401, "missing or invalid credential: send 'Authorization: Bearer <token>'"),
     ({"Authorization": "Bearer nope"}, 401,
      "missing or invalid credential: send 'Authorization: Bearer <token>'")],
)
def test_study_create_needs_credentials(client, coord_kit, headers, status, detail):
    r = client.post("/v1/studies", json=coord_kit.study_spec(), headers=headers)
    assert (r.status_code, r.json()["detail"]) == (status, detail)


def test_participant_cannot_create_study(client, make_participant, coord_kit):
    h = make_participant()
    r = client.post("/v1/studies", json=coord_kit.study_spec(), headers=h.headers)
    assert (r.status_code, r.json()["detail"]) == (403, "this endpoint needs the admin token")


def test_duplicate_study_is_409(client, make_study, coord_kit):
    make_study("s1")
    r = client.post("/v1/studies", json=coord_kit.study_spec("s1"), headers=ADMIN)
    assert r.status_code == 409 and "already exists" in r.json()["detail"]


@pytest.mark.parametrize(
    ("change", "fragment"),
    [({"features": [{"name": "a", "lo": 1.0, "hi": 0.0}]}, "features"),
     ({"privacy": {"epsilon_lsh": "0"}}, "privacy"),
     ({"grid": {"bins": 4}}, "epsilon_grid"),
     ({"study_id": "bad id!"}, "study_id")],
)
def test_invalid_study_is_422(client, coord_kit, change, fragment):
    r = client.post("/v1/studies", json={**coord_kit.study_spec(), **change}, headers=ADMIN)
    assert r.status_code == 422 and fragment in r.json()["detail"]


def test_list_studies_reports_contributors(client, make_study):
    make_study("s1")
    r = client.get("/v1/studies", headers=ADMIN)
    assert r.status_code == 200
    assert [(s["study_id"], s["contributors"], s["model_version"]) for s in r.json()] == [
        ("s1", 0, 0)
    ]


def test_members_and_config_access(client, make_participant, make_study):
    h1, h2 = make_participant("h1"), make_participant("h2")
    signed = make_study("s1", members=[h1])
    assert client.get("/v1/studies/s1/config", headers=h1.headers).json() == signed
    assert client.get("/v1/studies/s1/config", headers=ADMIN).status_code == 200
    r = client.get("/v1/studies/s1/config", headers=h2.headers)
    assert (r.status_code, r.json()["detail"]) == (404, "no study 's1'")  # as if missing
    r = client.get("/v1/studies/zz/config", headers=h1.headers)
    assert (r.status_code, r.json()["detail"]) == (404, "no study 'zz'")
    r = client.post("/v1/studies/s1/members", json={"participant": "ghost"}, headers=ADMIN)
    assert (r.status_code, r.json()["detail"]) == (404, "no participant named 'ghost'")
    r = client.post("/v1/studies/zz/members", json={"participant": "h1"}, headers=ADMIN)
    assert (r.status_code, r.json()["detail"]) == (404, "no study 'zz'")
    again = client.post("/v1/studies/s1/members", json={"participant": "h1"}, headers=ADMIN)
    assert again.status_code == 204


def test_model_etag_and_access(client, make_participant, make_study, coord_kit, rng):
    h1, h2 = make_participant("h1"), make_participant("h2")
    signed = make_study("s1", members=[h1])
    r = client.get("/v1/studies/s1/model", headers=h1.headers)
    assert r.status_code == 200 and r.headers["etag"] == '"s1-1-0"'
    assert r.json()["lsh"]["n_cells"] == coord_kit.config_of(signed).lsh_cells
    r304 = client.get("/v1/studies/s1/model", headers={**h1.headers, "If-None-Match": '"s1-1-0"'})
    assert r304.status_code == 304 and r304.content == b""
    body, _, _ = coord_kit.release(signed, rng)
    client.post("/v1/studies/s1/contributions", json=body, headers=h1.headers)
    r = client.get("/v1/studies/s1/model", headers={**h1.headers, "If-None-Match": '"s1-1-0"'})
    assert r.status_code == 200 and r.headers["etag"] == '"s1-1-1"' and r.json()["version"] == 1
    r = client.get("/v1/studies/s1/model", headers=h2.headers)
    assert (r.status_code, r.json()["detail"]) == (404, "no study 's1'")


def test_model_read_answers_every_caller_as_the_config_read(client, make_participant,
                                                             make_study):
    """The model GET checks the caller in one query of its own (services.model_lookup); every
    caller and study gets the status and detail of the dependency-checked config GET."""
    h1, h2, h3 = make_participant("h1"), make_participant("h2"), make_participant("h3")
    make_study("s1", members=[h1, h3])
    assert client.post("/v1/participants/h3/revoke", headers=ADMIN).status_code == 200
    callers = {"admin": ADMIN, "member": h1.headers, "outsider": h2.headers,
               "revoked": h3.headers, "none": {},
               "unknown": {"Authorization": "Bearer " + "x" * 43}}
    seen = set()
    for who, headers in callers.items():
        for study in ("s1", "zz"):
            model = client.get(f"/v1/studies/{study}/model", headers=headers)
            config = client.get(f"/v1/studies/{study}/config", headers=headers)
            assert model.status_code == config.status_code, (who, study)
            if model.status_code != 200:
                assert model.json() == config.json(), (who, study)
                assert model.headers.get("www-authenticate") == config.headers.get(
                    "www-authenticate"), (who, study)
            seen.add((who, study, model.status_code))
    assert {("admin", "s1", 200), ("member", "s1", 200), ("outsider", "s1", 404),
            ("revoked", "s1", 401), ("none", "s1", 401), ("unknown", "zz", 401),
            ("member", "zz", 404), ("admin", "zz", 404)} <= seen


def test_participant_lifecycle(client, make_participant):
    created = client.post("/v1/participants", json={"name": "h1", "epsilon_cap": "2"},
                          headers=ADMIN)
    assert created.status_code == 201 and len(created.json()["token"]) >= 40
    dup = client.post("/v1/participants", json={"name": "h1", "epsilon_cap": "2"}, headers=ADMIN)
    assert dup.status_code == 409 and "already exists" in dup.json()["detail"]
    listed = client.get("/v1/participants", headers=ADMIN).json()
    assert listed[0]["name"] == "h1" and "token" not in listed[0]
    token = created.json()["token"]
    me = client.get("/v1/me", headers={"Authorization": f"Bearer {token}"})
    assert me.status_code == 200 and me.json()["epsilon_remaining"] == "2"
    r = client.post("/v1/participants/h1/revoke", headers=ADMIN)
    assert r.status_code == 200 and r.json()["active"] is False
    r = client.get("/v1/me", headers={"Authorization": f"Bearer {token}"})
    assert (r.status_code, r.json()["detail"]) == (401, "participant 'h1' was revoked")
    r = client.post("/v1/participants/ghost/revoke", headers=ADMIN)
    assert (r.status_code, r.json()["detail"]) == (404, "no participant named 'ghost'")


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [({"name": "h1", "epsilon_cap": 1.5}, 422, "epsilon"),
     ({"name": "h1", "epsilon_cap": "-1"}, 422, "epsilon"),
     ({"name": "h1", "epsilon_cap": "1", "delta_cap": "1"}, 422, "delta_cap"),
     ({"name": "", "epsilon_cap": "1"}, 422, "name")],
)
def test_invalid_participant_is_422(client, body, status, fragment):
    r = client.post("/v1/participants", json=body, headers=ADMIN)
    assert r.status_code == status and fragment in r.json()["detail"]


def test_caps_can_rise_but_never_below_spent(client, make_participant, make_study, coord_kit,
                                             rng):
    h1 = make_participant("h1", epsilon_cap="1")
    signed = make_study("s1", members=[h1])
    body, _, _ = coord_kit.release(signed, rng)
    assert client.post("/v1/studies/s1/contributions", json=body,
                       headers=h1.headers).status_code == 201
    r = client.patch("/v1/participants/h1", json={"epsilon_cap": "3"}, headers=ADMIN)
    assert r.status_code == 200 and r.json()["epsilon_cap"] == "3"
    r = client.patch("/v1/participants/h1", json={"epsilon_cap": "0.25"}, headers=ADMIN)
    assert r.status_code == 409
    assert "already spent (epsilon=0.5, delta=0)" in r.json()["detail"]
    r = client.patch("/v1/participants/h1", json={"epsilon_cap": "0.5"}, headers=ADMIN)
    assert r.status_code == 200
    r = client.patch("/v1/participants/ghost", json={"epsilon_cap": "3"}, headers=ADMIN)
    assert r.status_code == 404
    r = client.patch("/v1/participants/h1", json={"epsilon_cap": "3"}, headers=h1.headers)
    assert r.status_code == 403
    budget = client.get("/v1/admin/budget", headers=ADMIN).json()
    assert budget[0]["epsilon_spent"] == "0.5" and budget[0]["entries"][0]["epsilon"] == "0.5"
    assert client.get("/v1/admin/budget", headers=h1.headers).status_code == 403


def test_admin_token_is_not_a_participant(client):
    r = client.get("/v1/me", headers=ADMIN)
    assert (r.status_code, r.json()["detail"]) == (403, "this endpoint needs a participant "
                                                        "credential")


def test_model_etag_changes_when_a_key_rotation_resigns_the_config(
    app, client, make_participant, make_study
):
    from coordinator.services.studies import resign_all

    h1 = make_participant("h1")
    make_study("s1", members=[h1])
    before = client.get("/v1/studies/s1/model", headers=h1.headers).headers["etag"]
    app.state.keys.rotate()
    with app.state.sessionmaker() as session:
        assert resign_all(session, app.state.keys) == [("s1", 2)]
    r = client.get("/v1/studies/s1/model", headers={**h1.headers, "If-None-Match": before})
    assert r.status_code == 200 and r.headers["etag"] == '"s1-2-0"'
    assert r.json()["config_version"] == 2


def test_credentials_never_start_with_a_dash(monkeypatch):
    """A participant passes its credential on a command line, where ``--token -x...`` reads
    as an option: one ``token_urlsafe`` in 64 starts with '-' and is drawn again."""
    from coordinator.services import participants

    assert not any(participants.new_token().startswith("-") for _ in range(2000))
    drawn = iter(["-first", "-second", "third"])
    monkeypatch.setattr(participants.secrets, "token_urlsafe", lambda n: next(drawn))
    assert participants.new_token() == "third"

