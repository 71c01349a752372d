"""Authentication before validation, and no study-existence oracle.

Parametrized over every operation of the app's OpenAPI schema: a caller without a valid
credential gets 401 whatever its body, never a 422 that tells it what the route accepts; a
participant asking about a study it is not a member of gets exactly the answer it gets for a
study that does not exist.
"""

from __future__ import annotations

import tempfile

import pytest
from coordinator_kit import ADMIN, ADMIN_TOKEN

from coordinator.api.deps import NOT_PARTICIPANT, UNAUTHENTICATED
from coordinator.config import Settings
from coordinator.main import create_app

ON_SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # auth is not SQL

OPEN = {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics"), ("GET", "/v1/key")}
PATH_VALUES = {"study_id": "s1", "number": "1", "name": "h1", "step": "keys"}


def _operations() -> list[tuple[str, str]]:
    """(method, path template) of every operation in the app's OpenAPI, open ones aside."""
    with tempfile.TemporaryDirectory() as data_dir:
        app = create_app(Settings(env="production", admin_token=ADMIN_TOKEN,
                                  database_url=f"sqlite:///{data_dir}/c.db", data_dir=data_dir))
        paths = app.openapi()["paths"]
        app.state.engine.dispose()
    found = [(method.upper(), path) for path, item in paths.items() for method in item]
    return sorted(op for op in found if op not in OPEN)


OPERATIONS = _operations()
STUDY_SCOPED = [op for op in OPERATIONS if "{study_id}" in op[1]]
MALFORMED = [b"{not json", b'{"unexpected": [1, 2]}', b"[]", b""]


def _url(path: str, **values: str) -> str:
    return path.format(**{**PATH_VALUES, **values})


def test_the_table_covers_the_api():
    assert len(OPERATIONS) >= 25
    assert ("POST", "/v1/studies/{study_id}/contributions") in OPERATIONS
    assert ("POST", "/v1/me/identity-key") in OPERATIONS


@ON_SQLITE
@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_no_valid_credential_is_401_before_any_validation(client, make_participant, make_study,
                                                          method, path):
    make_study("s1", members=[make_participant("h1")])
    for headers in ({}, {"Authorization": "Bearer " + "A" * 43}, {"Authorization": "Basic x"}):
        for content in MALFORMED:
            r = client.request(method, _url(path, number="not-a-number"), content=content,
                               headers={**headers, "Content-Type": "application/json"})
            assert (r.status_code, r.json()["detail"]) == (401, UNAUTHENTICATED), (headers,
                                                                                   content)
            assert r.headers["WWW-Authenticate"] == "Bearer"


@ON_SQLITE
@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_a_revoked_participant_is_401_before_any_validation(client, make_participant,
                                                            make_study, method, path):
    h1 = make_participant("h1")
    make_study("s1", members=[h1])
    assert client.post("/v1/participants/h1/revoke", headers=ADMIN).status_code == 200
    r = client.request(method, _url(path), content=b"{not json",
                       headers={**h1.headers, "Content-Type": "application/json"})
    assert (r.status_code, r.json()["detail"]) == (401, "participant 'h1' was revoked")


@ON_SQLITE
@pytest.mark.parametrize(
    ("method", "path", "who", "detail"),
    [
        ("POST", "/v1/studies", "participant", "this endpoint needs the admin token"),
        ("POST", "/v1/participants", "participant", "this endpoint needs the admin token"),
        ("PATCH", "/v1/participants/h1", "participant", "this endpoint needs the admin token"),
        ("POST", "/v1/me/identity-key", "admin", NOT_PARTICIPANT),
        ("POST", "/v1/studies/s1/cohorts/rounds/1", "admin", NOT_PARTICIPANT),
    ],
)
def test_a_wrong_role_is_403_before_any_validation(client, make_participant, make_study,
                                                   method, path, who, detail):
    h1 = make_participant("h1")
    make_study("s1", members=[h1])
    headers = h1.headers if who == "participant" else ADMIN
    for content in MALFORMED:
        r = client.request(method, path, content=content,
                           headers={**headers, "Content-Type": "application/json"})
        assert (r.status_code, r.json()["detail"]) == (403, detail), content


@ON_SQLITE
def test_an_allowed_caller_still_learns_what_is_wrong(client, make_participant, make_study):
    make_study("s1", members=[make_participant("h1")])
    r = client.post("/v1/participants", content=b"{not json",
                    headers={**ADMIN, "Content-Type": "application/json"})
    assert r.status_code == 422 and "JSON decode error" in r.json()["detail"]


@ON_SQLITE
@pytest.mark.parametrize(("method", "path"), STUDY_SCOPED)
def test_a_non_member_is_answered_as_for_a_missing_study(client, make_participant, make_study,
                                                         method, path):
    make_study("s1", members=[make_participant("h1")])
    outsider = make_participant("h2")
    headers = {**outsider.headers, "Content-Type": "application/json"}
    for content in (b"{}", b'{"idempotency_key": "k"}'):
        existing = client.request(method, _url(path, study_id="s1"), content=content,
                                  headers=headers)
        missing = client.request(method, _url(path, study_id="zz"), content=content,
                                 headers=headers)
        assert existing.status_code == missing.status_code, (existing.text, missing.text)
        shown = existing.json()["detail"]
        assert shown == missing.json()["detail"].replace("'zz'", "'s1'")
        if method == "GET":
            assert (existing.status_code, shown) == (404, "no study 's1'")
