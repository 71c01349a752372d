"""POST /v1/studies/{id}/contributions: every outcome, status and detail; nothing stored on 4xx."""

from __future__ import annotations

import base64
import hashlib
import zlib

import numpy as np
import pytest
from api_kit import model_lsh
from coordinator_kit import ADMIN

from common.wire.encoding import encode_counts

URL = "/v1/studies/s1/contributions"


def assert_nothing_stored(client, name="h1"):
    budget = {b["participant"]: b for b in client.get("/v1/admin/budget", headers=ADMIN).json()}
    assert budget[name]["epsilon_spent"] == "0"
    assert budget[name]["entries"] == []
    model = client.get("/v1/studies/s1/model", headers=ADMIN).json()
    assert model["version"] == 0 and model["contributors"] == 0


def test_later_release_replaces_earlier_one_and_both_are_charged(
    client, h1, signed, coord_kit, rng
):
    first, lsh1, _ = coord_kit.release(signed, rng)
    second, lsh2, _ = coord_kit.release(signed, rng)
    r1 = client.post(URL, json=first, headers=h1.headers)
    assert r1.status_code == 201
    model = client.get("/v1/studies/s1/model", headers=h1.headers).json()
    np.testing.assert_array_equal(model_lsh(model), lsh1)
    r2 = client.post(URL, json=second, headers=h1.headers)
    assert r2.status_code == 201
    assert r1.json()["epsilon"] == "0.5" and r2.json()["model_version"] == 2
    model = client.get("/v1/studies/s1/model", headers=h1.headers).json()
    assert (model["contributors"], model["version"]) == (1, 2)
    np.testing.assert_array_equal(model_lsh(model), lsh2)
    me = client.get("/v1/me", headers=h1.headers).json()
    assert me["epsilon_spent"] == "1" and me["epsilon_remaining"] == "0"
    assert [e["contribution_id"] for e in me["entries"]] == [r1.json()["id"], r2.json()["id"]]


def test_replay_returns_first_answer_and_charges_nothing(client, h1, signed, coord_kit, rng):
    body, _, _ = coord_kit.release(signed, rng)
    first = client.post(URL, json=body, headers=h1.headers)
    again = client.post(URL, json=body, headers=h1.headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()
    assert client.get("/v1/me", headers=h1.headers).json()["epsilon_spent"] == "0.5"


def test_same_key_different_bytes_is_409(client, h1, signed, coord_kit, rng):
    body, _, _ = coord_kit.release(signed, rng, key="k" * 20)
    other, _, _ = coord_kit.release(signed, rng, key="k" * 20)
    assert client.post(URL, json=body, headers=h1.headers).status_code == 201
    r = client.post(URL, json=other, headers=h1.headers)
    assert r.status_code == 409
    assert "idempotency key already used" in r.json()["detail"]
    assert client.get("/v1/me", headers=h1.headers).json()["epsilon_spent"] == "0.5"


def test_over_budget_is_409_with_spent_asked_cap(client, h1, signed, coord_kit, rng):
    for _ in range(2):
        body, _, _ = coord_kit.release(signed, rng)
        assert client.post(URL, json=body, headers=h1.headers).status_code == 201
    body, _, _ = coord_kit.release(signed, rng)
    r = client.post(URL, json=body, headers=h1.headers)
    assert r.status_code == 409
    detail = r.json()["detail"]
    assert "already spent (epsilon=1, delta=0)" in detail
    assert "asks (epsilon=0.5, delta=0)" in detail and "cap is (epsilon=1, delta=0)" in detail
    me = client.get("/v1/me", headers=h1.headers).json()
    assert me["epsilon_spent"] == "1" and len(me["entries"]) == 2


def _bomb(n_cells: int) -> dict:
    raw = b"\0" * (64 * 2**20)
    return {
        "layout": "dense",
        "n_cells": n_cells,
        "dtype": "<i8",
        "data": base64.b64encode(zlib.compress(raw, 9)).decode(),
        "sha256": hashlib.sha256(raw).hexdigest(),
    }


def _lsh(values, n_cells):
    return encode_counts(np.asarray(values), n_cells=n_cells).model_dump(mode="json")


BAD_INPUT = [
    # (name, mutate(body, config) -> body, status, detail fragment)
    (
        "stale version",
        lambda b, c: {**b, "config_version": c.version + 1},
        409,
        "is not the current version",
    ),
    (
        "wrong digest",
        lambda b, c: {**b, "config_digest": "0" * 64},
        409,
        "config digest does not match",
    ),
    ("epsilon too low", lambda b, c: {**b, "epsilon": "0.1"}, 422, "differs from the cost"),
    ("epsilon float", lambda b, c: {**b, "epsilon": 0.5}, 422, "epsilon"),
    ("epsilon NaN", lambda b, c: {**b, "epsilon": "NaN"}, 422, "epsilon"),
    (
        "wrong shape",
        lambda b, c: {**b, "lsh": _lsh(np.ones(c.lsh_cells + 1, int), c.lsh_cells + 1)},
        422,
        "lsh counts",
    ),
    (
        "huge counts",
        lambda b, c: {**b, "lsh": _lsh(np.full(c.lsh_cells, 2**50), c.lsh_cells)},
        422,
        "lsh counts",
    ),
    (
        "negative overflow",
        lambda b, c: {**b, "lsh": _lsh(np.full(c.lsh_cells, -(2**62)), c.lsh_cells)},
        422,
        "lsh counts",
    ),
    (
        "bad base64",
        lambda b, c: {**b, "lsh": {**b["lsh"], "data": "!!!notbase64"}},
        422,
        "lsh counts",
    ),
    (
        "digest mismatch",
        lambda b, c: {**b, "lsh": {**b["lsh"], "sha256": "1" * 64}},
        422,
        "lsh counts",
    ),
    ("decompression bomb", lambda b, c: {**b, "lsh": _bomb(c.lsh_cells)}, (413, 422), "lsh counts"),
    ("unexpected grid", lambda b, c: {**b, "grid": b["lsh"]}, 422, "has no grid"),
    ("short key", lambda b, c: {**b, "idempotency_key": "x"}, 422, "idempotency_key"),
    ("extra field", lambda b, c: {**b, "surprise": 1}, 422, "surprise"),
    ("counts as floats", lambda b, c: {**b, "lsh": {**b["lsh"], "n_cells": 1.5}}, 422, "n_cells"),
]


@pytest.mark.parametrize(
    ("mutate", "status", "fragment"),
    [pytest.param(m, s, f, id=name) for name, m, s, f in BAD_INPUT],
)
def test_bad_input_is_refused_and_nothing_stored(
    client, h1, signed, coord_kit, rng, mutate, status, fragment
):
    body, _, _ = coord_kit.release(signed, rng)
    r = client.post(URL, json=mutate(body, coord_kit.config_of(signed)), headers=h1.headers)
    expected = status if isinstance(status, tuple) else (status,)
    assert r.status_code in expected, r.text
    assert fragment in r.json()["detail"]
    assert_nothing_stored(client)


def test_malformed_json_is_422(client, h1, signed):
    r = client.post(
        URL,
        content=b'{"idempotency_key": ',
        headers={**h1.headers, "Content-Type": "application/json"},
    )
    assert r.status_code == 422
    assert "JSON" in r.json()["detail"]
    assert_nothing_stored(client)


def test_declared_oversized_body_is_413_before_reading(client, h1, signed):
    r = client.post(
        URL, content=b"x" * (300 * 1024), headers={**h1.headers, "Content-Type": "application/json"}
    )
    assert r.status_code == 413
    assert "FEDOD_MAX_BODY_BYTES" in r.json()["detail"]


def test_chunked_oversized_body_is_413(client, h1, signed):
    def chunks():
        for _ in range(100):
            yield b"x" * 8192

    r = client.post(
        URL, content=chunks(), headers={**h1.headers, "Content-Type": "application/json"}
    )
    assert r.status_code == 413
    assert_nothing_stored(client)


@pytest.mark.parametrize(
    ("who", "status", "fragment"),
    [
        ("nobody", 401, "missing or invalid credential"),
        ("forged", 401, "missing or invalid credential"),
        ("outsider", 404, "no study 's1'"),
        ("admin", 403, "needs a participant credential"),
    ],
)
def test_credentials(client, make_participant, h1, signed, coord_kit, rng, who, status, fragment):
    outsider = make_participant("h2")
    headers = {
        "nobody": {},
        "forged": {"Authorization": "Bearer " + "A" * 43},
        "outsider": outsider.headers,
        "admin": ADMIN,
    }[who]
    body, _, _ = coord_kit.release(signed, rng)
    r = client.post(URL, json=body, headers=headers)
    assert r.status_code == status
    assert fragment in r.json()["detail"]
    assert_nothing_stored(client)


def test_unknown_study_is_404(client, h1, signed, coord_kit, rng):
    body, _, _ = coord_kit.release(signed, rng)
    r = client.post("/v1/studies/nope/contributions", json=body, headers=h1.headers)
    assert r.status_code == 404 and r.json()["detail"] == "no study 'nope'"


def test_revoked_participant_is_refused_at_once(client, h1, signed, coord_kit, rng):
    assert client.post("/v1/participants/h1/revoke", headers=ADMIN).status_code == 200
    body, _, _ = coord_kit.release(signed, rng)
    r = client.post(URL, json=body, headers=h1.headers)
    assert r.status_code == 401 and r.json()["detail"] == "participant 'h1' was revoked"
    assert_nothing_stored(client)


def test_grid_study_charges_delta_and_merges_sparse(
    client, make_participant, make_study, coord_kit, rng
):
    h = make_participant("hg", epsilon_cap="5", delta_cap="0.001")
    grid = {"bins": 16, "cell_limit": 100}
    signed = make_study("sg", members=[h], grid=grid, epsilon_grid="0.25", delta_grid="1e-6")
    body, _, (idx, vals) = coord_kit.release(signed, rng)
    r = client.post("/v1/studies/sg/contributions", json=body, headers=h.headers)
    assert r.status_code == 201, r.text
    me = client.get("/v1/me", headers=h.headers).json()
    assert me["epsilon_spent"] == "0.75" and me["delta_spent"] == "0.000001"
    assert me["entries"][0]["kind"] == "lsh+grid"
    missing, _, _ = coord_kit.release(signed, rng, grid=None)
    r = client.post("/v1/studies/sg/contributions", json=missing, headers=h.headers)
    assert r.status_code == 422 and "grid counts are missing" in r.json()["detail"]
