"""Online gradient releases (SQLite and PostgreSQL): per-step sums over participants, the
iterate average, charges, the schedule's claims, refusals before anything is stored."""

from __future__ import annotations

import numpy as np
import pytest
from coordinator_kit import ADMIN
from online_api_kit import ONLINE, URL, body, create_study

from common.online import OnlineParams, federated_step, running_mean
from common.online.wire import decode_vector


@pytest.fixture
def members(make_participant):
    return [make_participant("h1", "10", "0.001"), make_participant("h2", "10", "0.001")]


@pytest.fixture
def signed(client, coord_kit, members):
    return create_study(client, coord_kit, members, ONLINE)


def test_releases_of_two_participants_make_one_step(client, signed, members):
    s1, s2 = np.array([1.0, -2.0, 0.5, 3.0]), np.array([-0.5, 1.0, 2.0, 0.0])
    r1 = client.post(URL, json=body(signed, "a", s1, 3), headers=members[0].headers)
    assert r1.status_code == 201, r1.text
    assert r1.json()["model_version"] == 0  # one of two releases pending
    pending = client.get("/v1/studies/s1/online/model", headers=members[1].headers).json()
    assert pending["version"] == 0 and pending["pending"] == 1
    r2 = client.post(URL, json=body(signed, "b", s2, 2), headers=members[1].headers)
    assert r2.status_code == 201 and r2.json()["model_version"] == 1
    model = client.get("/v1/studies/s1/online/model", headers=ADMIN).json()
    cfg = OnlineParams(**ONLINE).learner()
    expected = federated_step(np.zeros(4), 1, [s1, s2], [3, 2], cfg)
    np.testing.assert_allclose(decode_vector(model["weights"], 4), expected)
    np.testing.assert_allclose(decode_vector(model["average"], 4),
                               running_mean(np.zeros(4), expected, 1))
    budgets = {b["participant"]: b for b in client.get("/v1/admin/budget", headers=ADMIN).json()}
    assert budgets["h1"]["epsilon_spent"] == budgets["h2"]["epsilon_spent"] == "2"
    assert budgets["h1"]["delta_spent"] == "0.000001"
    for name in ("h1", "h2"):  # itemised like every charge, so the dashboard lists it
        [entry] = budgets[name]["entries"]
        assert (entry["kind"], entry["epsilon"], entry["study_id"]) == ("online", "2", "s1")


def test_ftrl_adds_every_members_prefix_increment(client, coord_kit, members):
    """DP-FTRL: the weights are ``-eta`` times the sum of the members' prefix increments,
    a count-0 release included (its increment is tree noise that must be summed); the
    average served is the weights."""
    online = {"dim": 4, "step_releases": 2, "window_seconds": 60, "eta": 0.5}
    signed = create_study(client, coord_kit, members, online)
    s1, s2, s3 = np.array([1.0, -2.0, 0.5, 3.0]), np.array([-0.5, 1.0, 2.0, 0.0]), np.ones(4)
    for key, noisy, count, member, window in (("a", s1, 3, 0, 0), ("b", s2, 0, 1, 0),
                                              ("c", s3, 1, 0, 1)):
        r = client.post(URL, json=body(signed, key, noisy, count, window, online=online),
                        headers=members[member].headers)
        assert r.status_code == 201, r.text
    model = client.get("/v1/studies/s1/online/model", headers=ADMIN).json()
    assert (model["version"], model["pending"]) == (1, 1)
    np.testing.assert_allclose(decode_vector(model["weights"], 4), -0.5 * (s1 + s2))
    assert model["average"] == model["weights"]
    claim = OnlineParams(**online).epoch_cost()
    budgets = {b["participant"]: b for b in client.get("/v1/admin/budget", headers=ADMIN).json()}
    assert budgets["h1"]["epsilon_spent"] == str((2 * claim.epsilon).normalize())


def test_refusals_store_and_charge_nothing(client, signed, members):
    h1 = members[0].headers
    bad = [
        ({**body(signed, "c", np.ones(4), 1), "epsilon": "1"}, 422),
        (body(signed, "c", np.ones(5), 1), 422),
        ({**body(signed, "c", np.ones(4), 1), "noisy_sum": "%%%"}, 422),
        ({**body(signed, "c", np.ones(4), 1), "count": -1}, 422),
        (body(signed, "c", np.ones(4), 10_001), 422),  # more than a window's 10 000 slots
        ({**body(signed, "c", np.ones(4), 1), "epochs": 1}, 422),  # claims are per window
        (body(signed, "c", np.ones(4), 1, window=10**9), 422),  # a window not ended yet
        ({**body(signed, "c", np.ones(4), 1), "config_version": 2}, 409),
    ]
    for doc, status in bad:
        r = client.post(URL, json=doc, headers=h1)
        assert r.status_code == status, (doc, r.text)
    budget = next(b for b in client.get("/v1/admin/budget", headers=ADMIN).json()
                  if b["participant"] == "h1")
    assert budget["epsilon_spent"] == "0" and budget["entries"] == []
    assert client.get("/v1/studies/s1/online/model", headers=ADMIN).json()["pending"] == 0


def test_one_release_per_window_in_order_and_noise_only_windows(client, signed, members):
    h1 = members[0].headers
    assert client.post(URL, json=body(signed, "d", np.ones(4), 2, window=5),
                       headers=h1).status_code == 201
    for window, status, detail in ((5, 409, "not after"), (3, 409, "not after")):
        r = client.post(URL, json=body(signed, "e", np.ones(4), 2, window=window), headers=h1)
        assert (r.status_code, detail in r.json()["detail"]) == (status, True), r.text
    empty = client.post(URL, json=body(signed, "f", np.ones(4), 0, window=6), headers=h1)
    assert empty.status_code == 201  # no slot queried: charged, stored, no step on it
    model = client.get("/v1/studies/s1/online/model", headers=ADMIN).json()
    step = federated_step(np.zeros(4), 1, [np.ones(4)], [2], OnlineParams(**ONLINE).learner())
    assert (model["version"], model["pending"]) == (1, 0)  # one step, on window 5 alone
    np.testing.assert_allclose(decode_vector(model["weights"], 4), step)
    budget = next(b for b in client.get("/v1/admin/budget", headers=ADMIN).json()
                  if b["participant"] == "h1")
    assert budget["epsilon_spent"] == "4"  # two windows at 2 each; refusals cost nothing


def test_a_study_without_an_online_section_has_no_online_model(client, make_study, members):
    make_study("plain", members=members)
    r = client.get("/v1/studies/plain/online/model", headers=ADMIN)
    assert r.status_code == 404 and "online section" in r.text
