"""Online gradient releases (SQLite and PostgreSQL): per-step sums over participants, the
iterate average, charges, refusals before anything is stored."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ADMIN

from common.online import OnlineParams, federated_step, running_mean
from common.online.wire import decode_vector, encode_vector
from common.signing import SignedConfig

ONLINE = {"dim": 4, "batch": 5, "step_releases": 2, "lam": 0.1}
URL = "/v1/studies/s1/online/gradients"


@pytest.fixture
def members(make_participant):
    return [make_participant("h1", "10", "0.001"), make_participant("h2", "10", "0.001")]


@pytest.fixture
def signed(client, coord_kit, members):
    spec = {**coord_kit.study_spec("s1"), "online": ONLINE}
    r = client.post("/v1/studies", json=spec, headers=ADMIN)
    assert r.status_code == 201, r.text
    for m in members:
        client.post("/v1/studies/s1/members", json={"participant": m.name}, headers=ADMIN)
    return r.json()["config"]


def body(signed, key: str, noisy_sum, count: int, epochs: int = 1) -> dict:
    cost = OnlineParams(**ONLINE).epoch_cost()
    eps, delta = (u * epochs for u in cost.to_units())
    from common.budget import PrivacyBudget

    claim = PrivacyBudget.from_units(eps, delta)
    return {"idempotency_key": key * 16, "config_version": 1,
            "config_digest": SignedConfig.model_validate(signed).digest(),
            "weights_version": 0, "count": count, "noisy_sum": encode_vector(noisy_sum),
            "epochs": epochs, "epsilon": str(claim.epsilon), "delta": str(claim.delta)}


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


def test_refusals_store_and_charge_nothing(client, signed, members):
    h1 = members[0].headers
    bad = [
        ({**body(signed, "c", np.ones(4), 1), "epsilon": "1"}, 422),
        (body(signed, "c", np.ones(5), 1), 422),
        ({**body(signed, "c", np.ones(4), 1), "noisy_sum": "%%%"}, 422),
        ({**body(signed, "c", np.ones(4), 1), "count": 0}, 422),
        (body(signed, "c", np.ones(4), 1, epochs=0), 422),  # a first release is charged
        (body(signed, "c", np.ones(4), 1, epochs=6), 409),  # past the cap of 10
        ({**body(signed, "c", np.ones(4), 1), "config_version": 2}, 409),
    ]
    for doc, status in bad:
        r = client.post(URL, json=doc, headers=h1)
        assert r.status_code == status, (doc, r.text)
    budget = next(b for b in client.get("/v1/admin/budget", headers=ADMIN).json()
                  if b["participant"] == "h1")
    assert budget["epsilon_spent"] == "0" and budget["entries"] == []
    assert client.get("/v1/studies/s1/online/model", headers=ADMIN).json()["pending"] == 0


def test_a_study_without_an_online_section_has_no_online_model(client, make_study, members):
    make_study("plain", members=members)
    r = client.get("/v1/studies/plain/online/model", headers=ADMIN)
    assert r.status_code == 404 and "online section" in r.text
