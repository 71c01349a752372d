"""Poisoning bounds on the cohort round routes: in-schema extreme values for
every cohort release kind are refused with a 422 naming the bound, never a 5xx; a refusal
changes nothing (ledgers, releases, rounds, results); no stored state or model is ever
non-finite; a closing step that fails ends its round ``failed`` and the next round goes
through from the last good state."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from api_kit import cohort_body, cohort_protocol, table_rows
from coordinator_kit import ADMIN
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.orm import Session

from common.cohorts.protocol import CohortState
from common.study.config import StudyConfig
from coordinator.db.cohorts import CohortRelease
from coordinator.db.tables import Base

KINDS = {
    "kmeans": {"method": "kmeans", "k": 2, "over": 2, "rounds": 2, "epsilon": "2"},
    "kmeans gaussian": {"method": "kmeans", "k": 2, "over": 2, "rounds": 2, "epsilon": "2",
                        "sum_noise": "gaussian", "declared_n": 10_000},
    "dpm level": {"method": "dpm", "epsilon": "2", "depth": 1, "bins": 8},
    "dpm leaves": {"method": "dpm", "epsilon": "2", "depth": 1, "bins": 8,
                   "leaf_noise": "gaussian", "declared_n": 10_000},
}
EXTREMES = [2**62, -(2**62), 1e308, -1e308, 5e-324, -0.0, 2**63, "1", None]
WIRE = "less than or equal|greater than or equal|valid integer"  # pydantic's 422 texts


def _assert_finite(app) -> None:
    """No stored cohort state or model holds a non-finite value."""
    def floats(v):
        if isinstance(v, float):
            yield v
        elif isinstance(v, dict | list):
            for x in v.values() if isinstance(v, dict) else v:
                yield from floats(x)

    with Session(app.state.engine) as s:
        for table in ("cohort_rounds", "cohort_results"):
            t = Base.metadata.tables[table]
            for row in s.execute(select(t)).mappings():
                text = row.get("state") or row.get("model")
                assert all(math.isfinite(f) for f in floats(json.loads(text)))


def _make(request, kind: str):
    """Study c1 of ``kind`` with members h1, h2, h3 (the ``cohort_study`` fixture)."""
    return request.getfixturevalue("cohort_study")(
        KINDS[kind], members=("h1", "h2", "h3"),
        delta_caps={h: "0.001" for h in ("h1", "h2", "h3")})


def _at_round(client, request, kind: str):
    """A running study of ``kind`` at the round under test (the DPM leaf round after an
    honest level 0); returns config, members, round number and its state."""
    config, hospitals = _make(request, kind)
    assert client.post("/v1/studies/c1/cohorts", headers=ADMIN).status_code == 201
    if kind == "dpm leaves":
        state = cohort_protocol(config).start()
        X = np.random.default_rng(1).uniform(0, 1, (50, 3))
        for h in hospitals:
            body = cohort_body(config, cohort_protocol(config).exact(state, X), 1, state=state)
            assert client.post("/v1/studies/c1/cohorts/rounds/1", json=body,
                               headers=h.headers).status_code == 201
    doc = client.get("/v1/studies/c1/cohorts", headers=ADMIN).json()
    return config, hospitals, doc["round"], CohortState(doc["round"] - 1, doc["state"])


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_extreme_values_are_refused_naming_the_bound_and_change_nothing(
        client, app, request, kind) -> None:
    config, (h1, h2, h3), number, state = _at_round(client, request, kind)
    proto = cohort_protocol(config)
    size, bounds = proto.size(state), proto.bounds(state)
    before = table_rows(app)
    for value in EXTREMES:
        for index in (0, size - 1):
            values: list = [0] * size
            values[index] = value
            body = {**cohort_body(config, [0] * size, number, state=state), "values": values}
            r = client.post(f"/v1/studies/c1/cohorts/rounds/{number}", json=body,
                            headers=h1.headers)
            assert r.status_code == 422, (value, r.text)
            detail = json.dumps(r.json()["detail"])
            if isinstance(value, int) and abs(value) <= 2**62:
                assert "public bound" in detail and f"outside [{bounds.lower[index]}" in detail
            else:
                assert any(w in detail for w in WIRE.split("|")), detail
            assert table_rows(app) == before
    for at in (bounds.upper + 1, bounds.lower - 1):  # one past the bound, every entry
        body = cohort_body(config, at, number, state=state)
        r = client.post(f"/v1/studies/c1/cohorts/rounds/{number}", json=body,
                        headers=h2.headers)
        assert r.status_code == 422 and "public bound" in r.json()["detail"], r.text
        assert table_rows(app) == before
    # the bound itself is an honest value: accepted, and the refusals blocked nothing
    for h, at in ((h1, bounds.upper), (h2, bounds.lower), (h3, bounds.upper)):
        r = client.post(f"/v1/studies/c1/cohorts/rounds/{number}",
                        json=cohort_body(config, at, number, state=state), headers=h.headers)
        assert r.status_code == 201, r.text
    assert client.get("/v1/studies/c1/cohorts", headers=ADMIN).json()["history"][
        number - 1]["status"] == "done"
    _assert_finite(app)


def test_three_members_at_two_to_the_62_are_refused_and_the_round_goes_on(
        client, app, request) -> None:
    """The measured wrap: three in-schema values of 2^62 used to be accepted and summed
    past int64. Each is refused before anything is stored or charged; honest releases then
    close the round and the run."""
    config, hospitals = _make(request, "kmeans")
    client.post("/v1/studies/c1/cohorts", headers=ADMIN)
    size = cohort_protocol(config).size(cohort_protocol(config).start())
    before = table_rows(app)
    for h in hospitals:
        r = client.post("/v1/studies/c1/cohorts/rounds/1",
                        json=cohort_body(config, [2**62] * size, 1), headers=h.headers)
        assert r.status_code == 422 and "public bound" in r.json()["detail"], r.text
    assert table_rows(app) == before
    for number in (1, 2):
        for h in hospitals:
            r = client.post(f"/v1/studies/c1/cohorts/rounds/{number}",
                            json=cohort_body(config, [0] * size, number), headers=h.headers)
            assert r.status_code == 201, r.text
    assert client.get("/v1/studies/c1/cohorts", headers=ADMIN).json()["status"] == "done"
    _assert_finite(app)


@pytest.mark.parametrize("kind", ["kmeans", "dpm level"])
def test_a_release_stored_before_the_bounds_fails_its_round_not_the_study(
        client, app, request, kind) -> None:
    """A round whose stored releases cannot be summed (here: 2^62 from three members, as a
    coordinator upgraded mid-round would hold) ends 'failed' with the reason; nothing
    non-finite is stored, the next round opens from the last good state and the run ends
    with a model."""
    config, hospitals = _make(request, kind)
    client.post("/v1/studies/c1/cohorts", headers=ADMIN)
    proto = cohort_protocol(config)
    start = proto.start()
    size = proto.size(start)
    for h in hospitals[:2]:
        r = client.post("/v1/studies/c1/cohorts/rounds/1", json=cohort_body(config, [0] * size, 1,
                                                                       state=start),
                        headers=h.headers)
        assert r.status_code == 201, r.text
    with Session(app.state.engine) as s:  # forge what the old coordinator accepted
        for row in s.scalars(select(CohortRelease)):
            row.payload = json.dumps([2**62] * size)
        s.commit()
    r = client.post("/v1/studies/c1/cohorts/rounds/1/close", headers=ADMIN)
    assert r.status_code == 200 and r.json()["status"] == "failed", r.text
    assert "public bound" in r.json()["detail"] and "not used" in r.json()["detail"]
    doc = client.get("/v1/studies/c1/cohorts", headers=ADMIN).json()
    assert doc["status"] == "running" and doc["round"] == 2
    if kind == "kmeans":  # the last good centroids are kept
        assert doc["state"]["centroids"] == start.data["centroids"]
    while doc["status"] == "running":
        state = CohortState(doc["round"] - 1, doc["state"])
        for h in hospitals[:2]:
            r = client.post(f"/v1/studies/c1/cohorts/rounds/{doc['round']}",
                            json=cohort_body(config, proto.exact(state, np.full((20, 3), 0.3)),
                                       doc["round"], state=state), headers=h.headers)
            assert r.status_code == 201, r.text
        doc = client.get("/v1/studies/c1/cohorts", headers=ADMIN).json()
    assert doc["status"] == "done" and doc["model"] is not None
    _assert_finite(app)


def test_a_step_that_would_store_a_non_finite_state_fails_its_round(client, app, request,
                                                                     monkeypatch) -> None:
    """Whatever makes the next state non-finite (here a forced NaN centroid), it is never
    stored: the round fails with the reason and the next round keeps the last good state."""
    from common.cohorts.protocol import KMeansProtocol

    config, hospitals = _make(request, "kmeans")
    client.post("/v1/studies/c1/cohorts", headers=ADMIN)
    start = cohort_protocol(config).start()
    real = KMeansProtocol.advance

    def poisoned(self, state, releases):
        after = real(self, state, releases)
        return CohortState(after.done, {**after.data, "centroids": [[math.nan] * 3]},
                           after.participants)

    monkeypatch.setattr(KMeansProtocol, "advance", poisoned)
    for h in hospitals:
        r = client.post("/v1/studies/c1/cohorts/rounds/1", headers=h.headers,
                        json=cohort_body(config, [0] * cohort_protocol(config).size(start), 1))
        assert r.status_code == 201, r.text
    doc = client.get("/v1/studies/c1/cohorts", headers=ADMIN).json()
    assert doc["history"][0]["status"] == "failed" and "JSON" in doc["history"][0]["detail"]
    assert doc["round"] == 2 and doc["state"]["centroids"] == start.data["centroids"]
    _assert_finite(app)


def test_a_failed_leaf_round_ends_the_run_failed_with_its_reason(client, app, request) -> None:
    """The DPM leaf round cannot be stepped over (no model without it): the run ends
    'failed', the reason is in the round's detail (API and dashboard), later releases get
    409, and nothing non-finite or partial is stored."""
    from coordinator.dashboard.cohorts import cohorts_page

    config, hospitals, number, state = _at_round(client, request, "dpm leaves")
    size = cohort_protocol(config).size(state)
    for h in hospitals[:2]:
        r = client.post(f"/v1/studies/c1/cohorts/rounds/{number}", headers=h.headers,
                        json=cohort_body(config, [0] * size, number, state=state))
        assert r.status_code == 201, r.text
    with Session(app.state.engine) as s:
        for row in s.scalars(select(CohortRelease).where(CohortRelease.number == number)):
            row.payload = json.dumps([-(2**62)] * size)
        s.commit()
    r = client.post(f"/v1/studies/c1/cohorts/rounds/{number}/close", headers=ADMIN)
    assert r.status_code == 200 and r.json()["status"] == "failed", r.text
    assert "cannot go on" in r.json()["detail"] and "public bound" in r.json()["detail"]
    doc = client.get("/v1/studies/c1/cohorts", headers=ADMIN).json()
    assert doc["status"] == "failed" and doc["model"] is None and doc["round"] is None
    r = client.post(f"/v1/studies/c1/cohorts/rounds/{number}", headers=hospitals[2].headers,
                    json=cohort_body(config, [0] * size, number, state=state))
    assert r.status_code == 409 and "closed" in r.json()["detail"]
    with Session(app.state.engine) as s:
        html = cohorts_page(s, "key", "c1")
    assert "failed (the last round says why)" in html and "public bound" in html
    _assert_finite(app)


def _studies(app, client, make_participant, coord_kit) -> dict:
    """One running study per kind with member hz (the DPM leaf study at its leaf round),
    made once per app: hypothesis runs many examples against one function-scoped app."""
    if not hasattr(app.state, "bound_studies"):
        hz = make_participant("hz", delta_cap="0.001")
        studies = {}
        for i, kind in enumerate(sorted(KINDS)):
            sid = f"k{i}"
            r = client.post("/v1/studies", json={**coord_kit.study_spec(sid),
                                                 "cohorts": KINDS[kind]}, headers=ADMIN)
            config = StudyConfig.model_validate_json(r.json()["config"]["payload"])
            client.post(f"/v1/studies/{sid}/members", json={"participant": "hz"},
                        headers=ADMIN)
            assert client.post(f"/v1/studies/{sid}/cohorts", headers=ADMIN).status_code == 201
            if kind == "dpm leaves":
                state = cohort_protocol(config).start()
                exact = cohort_protocol(config).exact(state, np.full((10, 3), 0.5))
                r = client.post(f"/v1/studies/{sid}/cohorts/rounds/1", headers=hz.headers,
                                json=cohort_body(config, exact, 1, state=state))
                assert r.status_code == 201, r.text
            doc = client.get(f"/v1/studies/{sid}/cohorts", headers=ADMIN).json()
            studies[kind] = (sid, config, doc["round"], CohortState(doc["round"] - 1,
                                                                    doc["state"]))
        app.state.bound_studies = (hz, studies)
    return app.state.bound_studies


FAR = 10**12  # past every bound of KINDS (k-means sums: 50 records x 4096 units + the tail)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.one_of(st.sampled_from(EXTREMES),
                       st.floats(allow_nan=False, allow_infinity=False),
                       st.integers(FAR, 2**64), st.integers(-(2**64), -FAR)),
       index=st.integers(0, 10**6), kind=st.sampled_from(sorted(KINDS)))
def test_no_extreme_value_is_a_5xx_and_a_refusal_changes_nothing(
        client, app, make_participant, coord_kit, value, index, kind) -> None:
    hz, studies = _studies(app, client, make_participant, coord_kit)
    sid, config, number, state = studies[kind]
    size = cohort_protocol(config).size(state)
    values: list = [0] * size
    values[index % size] = value
    before = table_rows(app)
    r = client.post(f"/v1/studies/{sid}/cohorts/rounds/{number}", headers=hz.headers,
                    json={**cohort_body(config, [0] * size, number, state=state), "values": values})
    assert r.status_code == 422, r.text
    assert table_rows(app) == before
    _assert_finite(app)
