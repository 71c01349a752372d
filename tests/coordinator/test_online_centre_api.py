"""Centring releases through the coordinator (SQLite and PostgreSQL): the centre served is
the summed noisy sums over slots x releases, they never step, ledgers are exact, and a
centring release after the first step is stored and charged (its body was observed) but does
not move the centre."""

from __future__ import annotations

import numpy as np
import pytest
from coordinator_kit import ADMIN
from online_api_kit import URL, body, create_study

from common.online import OnlineParams, centre_from_release, federated_step
from common.online.wire import decode_vector

CENTRE = 2
ONLINE = {"dim": 4, "step_releases": 2, "lam": 0.1, "window_seconds": 60, "window_slots": 10,
          "centre_window": CENTRE, "algorithm": "flmb"}


@pytest.fixture
def members(make_participant):
    return [make_participant("h1", "10", "0.001"), make_participant("h2", "10", "0.001")]


def spent(client) -> dict[str, dict]:
    return {b["participant"]: b for b in client.get("/v1/admin/budget", headers=ADMIN).json()}


def test_centring_releases_make_the_centre_and_later_releases_step(client, coord_kit,
                                                                   members):
    signed = create_study(client, coord_kit, members, ONLINE)
    c1, c2 = np.array([4.0, -2.0, 1.0, 10.0]), np.array([2.0, 6.0, -3.0, 10.0])
    for m, key, c in ((members[0], "a", c1), (members[1], "b", c2)):
        r = client.post(URL, json=body(signed, key, c, 10, CENTRE, online=ONLINE),
                        headers=m.headers)
        assert (r.status_code, r.json()["model_version"]) == (201, 0), r.text
    model = client.get("/v1/studies/s1/online/model", headers=members[0].headers).json()
    assert (model["version"], model["pending"], model["centre_releases"]) == (0, 0, 2)
    centre = decode_vector(model["centre"], 4)
    np.testing.assert_allclose(centre, [0.3, 0.2, -0.1, 0.0])  # (c1 + c2) / (10 x 2), no bias
    np.testing.assert_allclose(centre, centre_from_release(c1 + c2, 20))
    g1, g2 = np.array([1.0, 0.0, -1.0, 2.0]), np.array([0.5, 1.0, 0.0, -1.0])
    client.post(URL, json=body(signed, "c", g1, 3, CENTRE + 1, online=ONLINE),
                headers=members[0].headers)
    r = client.post(URL, json=body(signed, "d", g2, 1, CENTRE + 1, online=ONLINE),
                    headers=members[1].headers)
    assert r.json()["model_version"] == 1  # the two gradient releases, not the centring ones
    model = client.get("/v1/studies/s1/online/model", headers=ADMIN).json()
    expected = federated_step(np.zeros(4), 1, [g1, g2], [3, 1], OnlineParams(**ONLINE).learner())
    np.testing.assert_allclose(decode_vector(model["weights"], 4), expected)
    np.testing.assert_allclose(decode_vector(model["centre"], 4), centre)  # unchanged
    budgets = spent(client)
    for name in ("h1", "h2"):  # two windows at 2 each, each itemised
        assert (budgets[name]["epsilon_spent"], budgets[name]["delta_spent"]) == ("4",
                                                                                   "0.000002")
        assert [e["epsilon"] for e in budgets[name]["entries"]] == ["2", "2"]


def test_no_centre_is_served_before_a_centring_release(client, coord_kit, members):
    create_study(client, coord_kit, members, ONLINE)
    model = client.get("/v1/studies/s1/online/model", headers=ADMIN).json()
    assert (model["centre"], model["centre_releases"]) == (None, 0)


def test_a_late_centring_release_is_charged_but_does_not_move_the_centre(client, coord_kit,
                                                                        members):
    online = {**ONLINE, "step_releases": 1}
    signed = create_study(client, coord_kit, members, online)
    h1, h2 = members[0].headers, members[1].headers
    c1 = np.array([1.0, 2.0, 3.0, 4.0])
    assert client.post(URL, json=body(signed, "a", c1, 10, CENTRE, online=online),
                       headers=h1).status_code == 201
    assert client.post(URL, json=body(signed, "b", np.ones(4), 2, CENTRE + 1, online=online),
                       headers=h1).json()["model_version"] == 1
    before = client.get("/v1/studies/s1/online/model", headers=ADMIN).json()
    late = body(signed, "c", np.full(4, 5.0), 10, CENTRE, online=online)
    r = client.post(URL, json=late, headers=h2)
    assert (r.status_code, r.json()["model_version"]) == (201, 1), r.text
    assert client.post(URL, json=late, headers=h2).status_code == 200  # a replay, same release
    budgets = spent(client)  # charged once: the coordinator observed the noisy body
    assert (budgets["h2"]["epsilon_spent"], [e["epsilon"] for e in budgets["h2"]["entries"]]
            ) == ("2", ["2"])
    assert budgets["h1"]["epsilon_spent"] == "4"
    model = client.get("/v1/studies/s1/online/model", headers=ADMIN).json()
    assert model == before  # centre, weights, pending: untouched
    np.testing.assert_allclose(decode_vector(model["centre"], 4), centre_from_release(c1, 10))
    ok = client.post(URL, json=body(signed, "d", np.ones(4), 1, CENTRE + 1, online=online),
                     headers=h2)
    assert (ok.status_code, ok.json()["model_version"]) == (201, 2), ok.text


def test_centring_window_refusals_store_and_charge_nothing(client, coord_kit, members):
    signed = create_study(client, coord_kit, members, ONLINE)
    h1 = members[0].headers
    for doc, detail in (
        (body(signed, "e", np.ones(4), 9, CENTRE, online=ONLINE), "sums all 10 slots"),
        (body(signed, "e", np.ones(4), 1, CENTRE - 1, online=ONLINE), "before the centring window"),
    ):
        r = client.post(URL, json=doc, headers=h1)
        assert r.status_code == 422 and detail in r.json()["detail"], r.text
    assert spent(client)["h1"]["epsilon_spent"] == "0"
    model = client.get("/v1/studies/s1/online/model", headers=ADMIN).json()
    assert (model["centre"], model["pending"]) == (None, 0)

