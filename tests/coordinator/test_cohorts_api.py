"""Cohort round endpoints: a whole run, ledgers, retries, admin close, and bad input (4xx)."""

from __future__ import annotations

import json
from decimal import Decimal

import numpy as np
import pytest
from api_kit import COHORTS, cohort_body, cohort_protocol, model_lsh
from coordinator_kit import ADMIN

from common.cohorts.marks import marks_of
from common.cohorts.model import CohortModel
from common.cohorts.protocol import CohortState


def cohort_charges(budget):
    return [Decimal(e["epsilon"]) for e in budget["entries"] if e["kind"] == "cohort"]


def _exact(client, config, number, X):
    state = client.get("/v1/studies/c1/cohorts", headers=ADMIN).json()
    assert state["status"] == "running" and state["round"] == number
    return cohort_protocol(config).exact(CohortState(number - 1, state["state"]), X)


def test_a_dpm_tree_runs_through_the_same_rounds(client, cohort_study):
    config, hospitals = cohort_study({"method": "dpm", "epsilon": "2", "depth": 2, "bins": 8})
    client.post("/v1/studies/c1/cohorts", headers=ADMIN)
    rng = np.random.default_rng(5)
    data = [np.clip(np.vstack([rng.normal(0.2, 0.02, (100, 3)), rng.normal(0.8, 0.02, (100, 3))]),
                    0, 1) for _ in hospitals]
    proto, spent = cohort_protocol(config), Decimal(0)
    while (doc := client.get("/v1/studies/c1/cohorts", headers=ADMIN).json())["status"] != "done":
        state = CohortState(doc["round"] - 1, doc["state"])
        spent += proto.cost(state).epsilon
        for h, X in zip(hospitals, data, strict=True):
            body = cohort_body(config, proto.exact(state, X), doc["round"], state=state)
            r = client.post(f"/v1/studies/c1/cohorts/rounds/{doc['round']}", json=body,
                            headers=h.headers)
            assert r.status_code == 201, r.text
    model = CohortModel.from_json(json.dumps(doc["model"]))
    assert model.k == 2 and sorted(model.masses) == [200.0, 200.0] and all(model.rules)
    # two blobs of 200 each, centred off their leaf boxes' middles: no cohort is marked
    assert doc["marks"] == [[], []]
    assert len(doc["history"]) <= proto.rounds
    for h in hospitals:
        me = client.get("/v1/me", headers=h.headers).json()
        assert sum(cohort_charges(me)) == spent <= Decimal(2)


def test_gaussian_leaf_round_charges_its_delta_and_a_member_without_delta_cap_is_refused(
        client, cohort_study):
    """DPM with Gaussian leaf histograms: only the leaf round carries delta = 1/(n sqrt n)
    for the declared n; the coordinator charges it, and refuses (409) a member whose delta
    cap is 0 at that round, after charging it nothing for it."""
    from common.noise.gaussian import declared_delta

    config, (h1, h2) = cohort_study(
        {"method": "dpm", "epsilon": "2", "depth": 2, "bins": 8, "leaf_noise": "gaussian",
         "declared_n": 10_000}, delta_caps={"h1": "0.001"})
    client.post("/v1/studies/c1/cohorts", headers=ADMIN)
    rng = np.random.default_rng(5)
    X = np.clip(np.vstack([rng.normal(0.2, 0.02, (100, 3)), rng.normal(0.8, 0.02, (100, 3))]),
                0, 1)
    proto, refused = cohort_protocol(config), []
    while (doc := client.get("/v1/studies/c1/cohorts", headers=ADMIN).json())["status"] != "done":
        state = CohortState(doc["round"] - 1, doc["state"])
        cost = proto.cost(state)
        for h in (h1, h2):
            body = cohort_body(config, proto.exact(state, X), doc["round"], state=state)
            r = client.post(f"/v1/studies/c1/cohorts/rounds/{doc['round']}", json=body,
                            headers=h.headers)
            if cost.delta and h is h2:
                assert r.status_code == 409, r.text
                refused.append(doc["round"])
            else:
                assert r.status_code == 201, r.text
        if refused and doc["round"] == refused[-1]:
            client.post(f"/v1/studies/c1/cohorts/rounds/{doc['round']}/close", headers=ADMIN)
    assert len(refused) == 1 and doc["model"] is not None
    deltas = {h.name: [Decimal(e["delta"]) for e in client.get("/v1/me", headers=h.headers)
                       .json()["entries"] if e["kind"] == "cohort"] for h in (h1, h2)}
    assert deltas["h1"][-1] == declared_delta(10_000) == Decimal("0.000001")
    assert sum(deltas["h1"]) == Decimal("0.000001") and sum(deltas["h2"]) == 0
    assert len(deltas["h2"]) == len(deltas["h1"]) - 1


def test_run_to_the_released_model_with_exact_ledgers(client, cohort_study):
    # 8 seed centroids, not 4: with 4, about 2 % of the study's fresh seeds leave one
    # centroid nearest to both blobs (a k-means local optimum; 7 of 400 seeds simulated), and
    # the centre check below failed intermittently; with 8, 0 of 400
    config, (h1, h2) = cohort_study({**COHORTS, "over": 4})
    assert client.post("/v1/studies/c1/cohorts", headers=ADMIN).status_code == 201
    rng = np.random.default_rng(3)
    blobs = {h1.name: np.clip(rng.normal(0.2, 0.02, (200, 3)), 0, 1),
             h2.name: np.clip(rng.normal(0.8, 0.02, (200, 3)), 0, 1)}
    for number in (1, 2):
        for h in (h1, h2):
            # noise-free vectors: the coordinator's arithmetic is checked exactly
            values = _exact(client, config, number, blobs[h.name])
            r = client.post(f"/v1/studies/c1/cohorts/rounds/{number}",
                            json=cohort_body(config, values, number), headers=h.headers)
            assert r.status_code == 201, r.text
        retry = client.post(f"/v1/studies/c1/cohorts/rounds/{number}",
                            json=cohort_body(config, values, number), headers=h2.headers)
        assert retry.status_code == 200 and retry.json()["status"] == "done"
    doc = client.get("/v1/studies/c1/cohorts", headers=h1.headers).json()
    assert doc["status"] == "done" and [r["status"] for r in doc["history"]] == ["done"] * 2
    model = CohortModel.from_json(json.dumps(doc["model"]))
    # exactly what the pure protocol gives on the same vectors (the start is drawn from the
    # study's fresh seed, so how many records a pruned seed centroid took varies by study)
    proto = cohort_protocol(config)
    state = proto.start()
    for _ in (1, 2):
        state = proto.advance(state, [proto.exact(state, X) for X in blobs.values()])
    expected = proto.finish(state)
    # the marks are the pure rule's on the released model and the last round's two senders
    assert doc["marks"] == [list(m.flags) for m in marks_of(proto, model, 2)]
    np.testing.assert_array_equal(model.masses, expected.masses)
    np.testing.assert_array_equal(model.centroids, expected.centroids)
    centres = sorted(model.centroids[:, 0])
    assert abs(centres[0] - 0.2) < 0.05 and abs(centres[1] - 0.8) < 0.05
    # pruning drops only seed centroids under the count floor (20 here): little mass is lost
    assert sum(model.masses) >= 400 - 2 * 20
    for h in (h1, h2):
        me = client.get("/v1/me", headers=h.headers).json()
        charges = [e for e in me["entries"] if e["kind"] == "cohort"]
        assert len(charges) == 2  # the retries charged nothing
        assert sum(Decimal(e["epsilon"]) for e in charges) == Decimal(COHORTS["epsilon"])



def test_gaussian_kmeans_sums_charge_delta_split_over_the_rounds(client, cohort_study):
    """k-means with Gaussian per-cluster sums: every round carries its share of
    delta = 1/(n sqrt n) for the declared n (split evenly over the rounds); the coordinator
    accepts the rounds at that cost and both ledgers add up to (epsilon, delta) exactly."""
    from common.noise.gaussian import declared_delta

    config, (h1, h2) = cohort_study(
        {**COHORTS, "over": 4, "sum_noise": "gaussian", "declared_n": 10_000},
        delta_caps={"h1": "0.001", "h2": "0.001"})
    assert client.post("/v1/studies/c1/cohorts", headers=ADMIN).status_code == 201
    rng = np.random.default_rng(4)
    blobs = {h1.name: np.clip(rng.normal(0.2, 0.02, (200, 3)), 0, 1),
             h2.name: np.clip(rng.normal(0.8, 0.02, (200, 3)), 0, 1)}
    proto = cohort_protocol(config)
    for number in (1, 2):
        state = CohortState(number - 1, {})
        assert proto.cost(state).delta == declared_delta(10_000) / 2
        for h in (h1, h2):
            values = _exact(client, config, number, blobs[h.name])
            r = client.post(f"/v1/studies/c1/cohorts/rounds/{number}",
                            json=cohort_body(config, values, number), headers=h.headers)
            assert r.status_code == 201, r.text
    doc = client.get("/v1/studies/c1/cohorts", headers=ADMIN).json()
    assert doc["status"] == "done" and doc["model"] is not None
    for h in (h1, h2):
        entries = [e for e in client.get("/v1/me", headers=h.headers).json()["entries"]
                   if e["kind"] == "cohort"]
        assert [Decimal(e["delta"]) for e in entries] == [Decimal("0.0000005")] * 2
        assert sum(Decimal(e["epsilon"]) for e in entries) == Decimal(COHORTS["epsilon"])

def test_a_different_vector_under_a_stored_round_is_refused(client, cohort_study):
    config, (h1, _) = cohort_study()
    client.post("/v1/studies/c1/cohorts", headers=ADMIN)
    n = cohort_protocol(config).size(cohort_protocol(config).start())
    first = client.post("/v1/studies/c1/cohorts/rounds/1", json=cohort_body(config, [0] * n, 1),
                        headers=h1.headers)
    assert first.status_code == 201
    other = client.post("/v1/studies/c1/cohorts/rounds/1", json=cohort_body(config, [1] * n, 1),
                        headers=h1.headers)
    assert other.status_code == 409 and "exactly the same release" in other.json()["detail"]


def test_admin_close_moves_on_without_the_missing_member(client, cohort_study):
    config, (h1, h2) = cohort_study()
    client.post("/v1/studies/c1/cohorts", headers=ADMIN)
    empty = client.post("/v1/studies/c1/cohorts/rounds/1/close", headers=ADMIN)
    assert empty.status_code == 409 and "no release yet" in empty.json()["detail"]
    n = cohort_protocol(config).size(cohort_protocol(config).start())
    client.post("/v1/studies/c1/cohorts/rounds/1", json=cohort_body(config, [0] * n, 1),
                headers=h1.headers)
    closed = client.post("/v1/studies/c1/cohorts/rounds/1/close", headers=ADMIN)
    assert closed.status_code == 200 and "missing: h2" in closed.json()["detail"]
    doc = client.get("/v1/studies/c1/cohorts", headers=ADMIN).json()
    assert doc["round"] == 2 and doc["history"][1]["expected"] == ["h1"]
    late = client.post("/v1/studies/c1/cohorts/rounds/2", json=cohort_body(config, [0] * n, 2),
                       headers=h2.headers)
    assert late.status_code == 409 and "not expected" in late.json()["detail"]


def test_over_cap_release_is_refused_and_not_stored(client, cohort_study):
    config, (h1, _) = cohort_study(cap="0.5")  # a round costs 1
    client.post("/v1/studies/c1/cohorts", headers=ADMIN)
    n = cohort_protocol(config).size(cohort_protocol(config).start())
    r = client.post("/v1/studies/c1/cohorts/rounds/1", json=cohort_body(config, [0] * n, 1),
                    headers=h1.headers)
    assert r.status_code == 409 and "budget exceeded" in r.json()["detail"]
    me = client.get("/v1/me", headers=h1.headers).json()
    assert me["entries"] == [] and Decimal(me["epsilon_spent"]) == 0
    assert client.get("/v1/studies/c1/cohorts", headers=ADMIN).json()["history"][0]["sent"] == []


@pytest.mark.parametrize(("path", "override", "status", "detail"), [
    ("/rounds/1", {"values": [0]}, 422, "takes a vector of"),
    ("/rounds/1", {"epsilon": "0.3"}, 422, "claimed cost"),
    ("/rounds/1", {"config_version": 9}, 409, "not the current version"),
    ("/rounds/1", {"values": [0.5]}, 422, "values"),
    ("/rounds/1", {"values": [2**63]}, 422, "values"),
    ("/rounds/1", {"idempotency_key": "a b"}, 422, "idempotency_key"),
    ("/rounds/7", {}, 404, "no cohort round 7"),
])
def test_bad_releases_get_4xx_with_a_reason(client, cohort_study, path, override, status,
                                             detail):
    config, (h1, _) = cohort_study()
    client.post("/v1/studies/c1/cohorts", headers=ADMIN)
    n = cohort_protocol(config).size(cohort_protocol(config).start())
    r = client.post("/v1/studies/c1/cohorts" + path,
                    json=cohort_body(config, [0] * n, 1) | override, headers=h1.headers)
    assert r.status_code == status, r.text
    assert detail in r.json()["detail"]


def test_study_without_cohorts_and_access_rules(client, coord_kit, make_participant,
                                                make_study, cohort_study):
    h3 = make_participant("h3")
    signed = make_study("plain", members=[h3])
    assert "cohorts" not in json.loads(signed["payload"])  # old configs keep their form
    r = client.get("/v1/studies/plain/cohorts", headers=h3.headers)
    assert r.status_code == 409 and "no cohorts section" in r.json()["detail"]
    cohort_study()
    assert client.post("/v1/studies/c1/cohorts", headers=h3.headers).status_code == 404
    assert client.get("/v1/studies/c1/cohorts", headers=h3.headers).status_code == 404
    doc = client.get("/v1/studies/c1/cohorts", headers=ADMIN).json()
    assert doc["status"] == "not_started"
    assert client.post("/v1/studies/c1/cohorts", headers=ADMIN).status_code == 201
    again = client.post("/v1/studies/c1/cohorts", headers=ADMIN)
    assert again.status_code == 409 and "already started" in again.json()["detail"]


@pytest.mark.parametrize(("cohorts", "detail"), [
    ({key: v for key, v in COHORTS.items() if key != "k"}, "needs k"),
    ({"method": "dpm", "epsilon": "0.000000005", "depth": 5}, "too small to split"),
    ({**COHORTS, "epsilon": "0.000000003", "rounds": 5}, "too small to split"),
    ({**COHORTS, "epsilon": 1.0}, "not a float"),
    ({**COHORTS, "k": 0}, "k"),
])
def test_invalid_cohort_sections_are_refused(client, coord_kit, cohorts, detail):
    spec = {**coord_kit.study_spec("bad"), "cohorts": cohorts}
    r = client.post("/v1/studies", json=spec, headers=ADMIN)
    assert r.status_code == 422 and detail in r.json()["detail"], r.text


def test_a_cohort_release_is_never_replaced_by_an_lsh_release(client, cohort_study, coord_kit):
    """Cohort vectors are itemised as contributions of model version 0: a later LSH release
    of the same participant starts the LSH model afresh (1 contributor, exactly its counts)
    and replaces nothing, on both storage paths (SQLite's and PostgreSQL's two-statement
    ingest)."""
    config, (h1, _) = cohort_study()
    assert client.post("/v1/studies/c1/cohorts", headers=ADMIN).status_code == 201
    values = _exact(client, config, 1, np.full((20, 3), 0.5))
    assert client.post("/v1/studies/c1/cohorts/rounds/1", json=cohort_body(config, values, 1),
                       headers=h1.headers).status_code == 201
    signed = client.get("/v1/studies/c1/config", headers=h1.headers).json()
    body, lsh, _ = coord_kit.release(signed, np.random.default_rng(9))
    r = client.post("/v1/studies/c1/contributions", json=body, headers=h1.headers)
    assert r.status_code == 201, r.text
    model = client.get("/v1/studies/c1/model", headers=h1.headers).json()
    assert model["contributors"] == 1
    np.testing.assert_array_equal(model_lsh(model), lsh)
    kinds = [e["kind"] for e in client.get("/v1/me", headers=h1.headers).json()["entries"]]
    assert sorted(kinds) == ["cohort", "lsh"]
