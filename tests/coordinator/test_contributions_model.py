"""The merged model under the folded storage layout: one release per participant counts,
idempotency keys are scoped per (participant, study), budget refusals come before decoding."""

from __future__ import annotations

import base64
import hashlib
import zlib

import numpy as np
import pytest
from coordinator_kit import ADMIN

from common.wire.encoding import EncodedCounts, decode_counts


def model_of(client, study_id, headers=ADMIN) -> dict:
    r = client.get(f"/v1/studies/{study_id}/model", headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


def lsh_of(model: dict) -> np.ndarray:
    enc = model["lsh"]
    data = zlib.decompress(base64.b64decode(enc["data"]))
    assert hashlib.sha256(data).hexdigest() == enc["sha256"]
    return np.frombuffer(data, dtype=np.dtype(enc["dtype"])).astype(np.int64)


def post(client, study_id, body, who):
    return client.post(f"/v1/studies/{study_id}/contributions", json=body, headers=who.headers)


@pytest.mark.parametrize("read_between", [False, True], ids=["one-fold", "fold-each"])
def test_model_sums_the_latest_release_of_each_participant(
    client, make_participant, make_study, coord_kit, rng, read_between
):
    a, b, c = (make_participant(n, epsilon_cap="10") for n in ("ha", "hb", "hc"))
    signed = make_study("s1", members=[a, b, c])
    latest = {}
    for who in (a, b, a, a, c, b):
        body, lsh, _ = coord_kit.release(signed, rng)
        assert post(client, "s1", body, who).status_code == 201
        latest[who.name] = lsh
        if read_between:
            model = model_of(client, "s1")
            np.testing.assert_array_equal(lsh_of(model), sum(latest.values()))
            assert model["contributors"] == len(latest)
    model = model_of(client, "s1", a.headers)
    assert (model["version"], model["contributors"]) == (6, 3)
    np.testing.assert_array_equal(lsh_of(model), latest["ha"] + latest["hb"] + latest["hc"])
    (study,) = client.get("/v1/studies", headers=ADMIN).json()
    assert (study["model_version"], study["contributors"]) == (6, 3)
    me = client.get("/v1/me", headers=a.headers).json()
    assert me["epsilon_spent"] == "1.5" and len(me["entries"]) == 3


def test_sparse_grid_replacement_drops_cells_only_the_old_release_had(
    client, make_participant, make_study, coord_kit, rng
):
    a, b = make_participant("ha", "5", "0.001"), make_participant("hb", "5", "0.001")
    grid = {"bins": 16, "cell_limit": 100}
    signed = make_study("sg", members=[a, b], grid=grid, epsilon_grid="0.25", delta_grid="1e-6")
    releases = {}
    for who in (a, b, a):
        body, _, sparse = coord_kit.release(signed, rng)
        assert post(client, "sg", body, who).status_code == 201, body
        releases[who.name] = sparse
        model = model_of(client, "sg")
        enc = EncodedCounts.model_validate(model["grid"])
        idx, vals = decode_counts(enc, expected_cells=enc.n_cells)
        expected = np.zeros(enc.n_cells, dtype=np.int64)
        for cells, values in releases.values():
            np.add.at(expected, cells[:, 0], values)  # one-word keys (common.histograms.cellkeys)
        assert idx is not None and idx.shape[1] == 1
        np.testing.assert_array_equal(idx[:, 0], np.flatnonzero(expected))
        np.testing.assert_array_equal(vals, expected[idx[:, 0]])


def test_idempotency_key_is_scoped_per_study(client, make_participant, make_study, coord_kit, rng):
    h = make_participant("h1", epsilon_cap="10")
    signed_a = make_study("sa", members=[h])
    signed_b = make_study("sb", members=[h])
    body_a, _, _ = coord_kit.release(signed_a, rng, key="k" * 24)
    first = post(client, "sa", body_a, h)
    assert first.status_code == 201
    replayed = post(client, "sb", body_a, h)  # A's accepted body sent to B
    assert replayed.status_code == 409, replayed.text
    assert "config digest does not match" in replayed.json()["detail"]
    body_b, lsh_b, _ = coord_kit.release(signed_b, rng, key="k" * 24)
    second = post(client, "sb", body_b, h)
    assert second.status_code == 201, second.text
    assert second.json()["id"] != first.json()["id"] and second.json()["study_id"] == "sb"
    np.testing.assert_array_equal(lsh_of(model_of(client, "sb")), lsh_b)
    assert post(client, "sb", body_b, h).json()["id"] == second.json()["id"]  # replay in B


def test_over_budget_is_refused_before_the_counts_are_decoded(
    client, make_participant, make_study, coord_kit, rng
):
    h = make_participant("h1", epsilon_cap="0.5")
    signed = make_study("s1", members=[h])
    body, _, _ = coord_kit.release(signed, rng)
    assert post(client, "s1", body, h).status_code == 201
    garbage, _, _ = coord_kit.release(signed, rng)
    garbage["lsh"] = {**garbage["lsh"], "data": "!!!not base64, never decoded"}
    r = post(client, "s1", garbage, h)
    assert r.status_code == 409, r.text
    assert "privacy budget exceeded" in r.json()["detail"]


def test_epsilon_sum_past_the_exact_range_is_409_not_500(
    client, make_participant, make_study, coord_kit, rng
):
    h = make_participant("h1", epsilon_cap="9000000000")
    signed = make_study("s1", members=[h], epsilon_lsh="5000000000")
    body, _, _ = coord_kit.release(signed, rng)
    assert post(client, "s1", body, h).status_code == 201
    again, _, _ = coord_kit.release(signed, rng)
    r = post(client, "s1", again, h)
    assert r.status_code == 409, r.text
    assert "privacy budget exceeded" in r.json()["detail"]
    assert client.get("/v1/me", headers=h.headers).json()["epsilon_spent"] == "5000000000"
