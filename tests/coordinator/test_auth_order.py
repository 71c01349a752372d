"""Authentication before validation, and no study-existence oracle.

Parametrized over every operation of the app's OpenAPI schema: a caller without a valid
credential gets 401 whatever its body, never a 422 that tells it what the route accepts; a
caller of the wrong role (the admin token on a participant route, a participant on an admin
route) gets 403 whatever its body, on every route the app has; a participant asking about a
study it is not a member of gets exactly the answer it gets for a study that does not exist.
"""

from __future__ import annotations

import inspect
import re
import tempfile

import pytest
from coordinator_kit import ADMIN, ADMIN_TOKEN
from fastapi.routing import APIRoute

from coordinator.api.auth_route import AuthFirstRoute, dependency_calls
from coordinator.api.deps import (
    NOT_PARTICIPANT,
    UNAUTHENTICATED,
    bearer,
    participant_token,
    require_admin,
    require_participant,
)
from coordinator.config import Settings
from coordinator.main import create_app

ON_SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # auth is not SQL

OPEN = {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics"), ("GET", "/v1/key"),
        # the consortium key holder's beacon: it has no credential here; the post verifies
        # under the key of the membership certificate, and both answer one 404 for a study
        # that does not exist or waits for no beacon (test_rounds_beacon)
        ("GET", "/v1/studies/{study_id}/rounds/beacon"),
        ("POST", "/v1/studies/{study_id}/rounds/{number}/beacon")}
PATH_VALUES = {"study_id": "s1", "number": "1", "name": "h1", "step": "keys"}


def _app_routes() -> tuple[dict[str, dict[str, object]], list[tuple[str, APIRoute]]]:
    """The app's OpenAPI paths, and (full path, route) of every API route it serves (in the
    schema or not)."""
    with tempfile.TemporaryDirectory() as data_dir:
        app = create_app(Settings(env="production", admin_token=ADMIN_TOKEN,
                                  database_url=f"sqlite:///{data_dir}/c.db", data_dir=data_dir))
        paths = app.openapi()["paths"]
        app.state.engine.dispose()
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # FastAPI before lazily included routers: app.routes is flat already
        return paths, [(r.path, r) for r in app.routes if isinstance(r, APIRoute)]
    return paths, [(str(c.path), c.original_route) for c in iter_route_contexts(app.routes)
                   if isinstance(c.original_route, APIRoute)]


PATHS, ROUTES = _app_routes()
OPERATIONS = sorted(op for op in ((method.upper(), path) for path, item in PATHS.items()
                                  for method in item) if op not in OPEN)
AUTHENTICATED = [(path, route) for path, route in ROUTES
                 if bearer in dependency_calls(route.dependant)
                 and not {(m, path) for m in route.methods} <= OPEN]
ADMIN_ONLY = "this endpoint needs the admin token"
# a role a route's dependencies refuse: the caller it refuses and the 403's detail
REFUSES = {require_admin: ("participant", ADMIN_ONLY),
           require_participant: ("admin", NOT_PARTICIPANT),
           participant_token: ("admin", NOT_PARTICIPANT)}
# a role check a handler makes itself, and the dependency that must declare it beside
CHECKED_IN_HANDLER = {"require_admin": {require_admin},
                      "require_participant": {require_participant, participant_token}}


def _wrong_roles() -> list[tuple[str, str, str, str]]:
    """(method, path, refused caller, detail) for every role check of every route."""
    found = set()
    for path, route in AUTHENTICATED:
        for call in dependency_calls(route.dependant) & REFUSES.keys():
            who, detail = REFUSES[call]
            found |= {(method, path, who, detail) for method in route.methods}
    return sorted(found)


WRONG_ROLES = _wrong_roles()
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


def test_every_authenticated_route_checks_its_caller_first():
    """Every route that reads the credential is an ``AuthFirstRoute``, and a role its handler
    checks itself is declared among its dependencies too, where the 403 comes first."""
    assert len(AUTHENTICATED) >= 25
    for path, route in AUTHENTICATED:
        assert isinstance(route, AuthFirstRoute), path
        calls = dependency_calls(route.dependant)
        source = inspect.getsource(route.endpoint)
        for check, declared in CHECKED_IN_HANDLER.items():
            if re.search(rf"\b{check}\(", source):
                assert calls & declared, (path, check)


def test_the_wrong_roles_cover_both_roles():
    who = {(method, path): who for method, path, who, _ in WRONG_ROLES}
    assert who[("POST", "/v1/studies")] == who[("PATCH", "/v1/participants/{name}")] == (
        "participant")
    assert who[("POST", "/v1/studies/{study_id}/contributions")] == "admin"
    assert who[("POST", "/v1/studies/{study_id}/online/gradients")] == "admin"
    assert who[("POST", "/v1/me/identity-key")] == "admin"


@ON_SQLITE
@pytest.mark.parametrize(("method", "path", "who", "detail"), WRONG_ROLES)
def test_a_wrong_role_is_403_before_any_validation(client, make_participant, make_study,
                                                   method, path, who, detail):
    h1 = make_participant("h1")
    make_study("s1", members=[h1])
    headers = h1.headers if who == "participant" else ADMIN
    for number in ("1", "not-a-number"):
        for content in MALFORMED:
            r = client.request(method, _url(path, number=number), content=content,
                               headers={**headers, "Content-Type": "application/json"})
            assert (r.status_code, r.json()["detail"]) == (403, detail), (number, content)


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
