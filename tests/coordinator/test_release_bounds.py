"""Poisoning bounds on the independent-release and online routes:
in-schema extreme values for LSH, dense grid, sparse grid, online gradient and online centring
releases are refused with a 422 naming the bound, never a 5xx; a refusal changes nothing
(every table compared before and after); no stored or served model is ever non-finite; a step
that would leave the float range is skipped and the next release goes through."""

from __future__ import annotations

import base64
import math
import re
import struct

import numpy as np
import pytest
from api_kit import table_rows
from coordinator_kit import ADMIN
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from online_api_kit import URL, body, create_study

from common.histograms.cellkeys import key_words, keys_from_ints
from common.histograms.release_bounds import release_bounds
from common.online import OnlineParams
from common.online.bounds import online_release_bound
from common.online.wire import decode_vector
from common.wire.encoding import EncodedCounts, decode_counts, encode_counts

GRIDS = {
    "lsh": None,
    "dense grid": {"bins": 4},
    "sparse grid": {"bins": 16, "cell_limit": 100},
}
INTS = [2**62, -(2**62), 2**63 - 1, -(2**63), 2**40, -(10**6), 2 * 10**6]
FLOATS = [1e308, -1e308, 5e-324, -0.0, math.inf, math.nan, 1e154]
ONLINE = {"dim": 4, "step_releases": 1, "lam": 0.1, "window_seconds": 60, "window_slots": 10}
CENTRED = {**ONLINE, "centre_window": 0}
OK = {200, 201, 422}


@pytest.fixture
def study(make_participant, make_study):
    """``kind`` -> (signed config, member) of a study ``s-<kind>``."""
    made = {}

    def make(kind: str):
        if kind not in made:
            h = make_participant(f"h{len(made)}", "1000", "0.001")
            grid = GRIDS[kind]
            extra = {} if grid is None else {
                "grid": grid, "epsilon_grid": "0.25",
                "delta_grid": "1e-6" if "sparse" in kind else "0"}
            sid = "s-" + kind.replace(" ", "-")
            made[kind] = (make_study(sid, members=[h], **extra), h, sid)
        return made[kind]
    return make


def _contribution(coord_kit, signed, rng, kind: str, value: int) -> dict:
    """A release of ``kind`` whose first cell holds ``value`` (other cells honest)."""
    config = coord_kit.config_of(signed)
    if kind == "lsh":
        lsh = coord_kit.release(signed, rng)[1].copy()
        lsh[0] = value
        return coord_kit.release(signed, rng, lsh_values=lsh)[0]
    if kind == "dense grid":
        grid = np.zeros(config.grid_cells, dtype=np.int64)
        grid[0] = value
        return coord_kit.release(signed, rng, grid_values=grid)[0]
    low = release_bounds(config).threshold
    enc = encode_counts(np.array([value, low]), n_cells=config.grid_cells,
                        indices=keys_from_ints([0, 1], key_words(config.grid_cells)))
    return coord_kit.release(signed, rng, grid=enc.model_dump(mode="json"))[0]


def _finite_models(client, sid: str) -> None:
    model = client.get(f"/v1/studies/{sid}/model", headers=ADMIN).json()
    for part in ("lsh", "grid"):
        if model.get(part):
            enc = EncodedCounts.model_validate(model[part])
            decode_counts(enc, expected_cells=enc.n_cells, max_abs=2**62)  # ints: finite


@pytest.mark.parametrize("kind", list(GRIDS))
@pytest.mark.parametrize("value", INTS)
def test_extreme_cells_are_refused_naming_the_bound_and_change_nothing(
        client, app, coord_kit, rng, study, kind, value):
    signed, h, sid = study(kind)
    url = f"/v1/studies/{sid}/contributions"
    assert client.post(url, json=coord_kit.release(signed, rng)[0],
                       headers=h.headers).status_code == 201  # an honest one first
    before = table_rows(app)
    r = client.post(url, json=_contribution(coord_kit, signed, rng, kind, value),
                    headers=h.headers)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert re.search(rf"(LSH table \d+|grid value 0|value 0) .*is {value}; the public bound is",
                     detail), detail
    assert table_rows(app) == before
    _finite_models(client, sid)


@pytest.mark.parametrize("kind", list(GRIDS))
def test_a_value_one_past_the_bound_is_refused_and_one_at_it_is_not(
        client, coord_kit, rng, study, kind):
    signed, h, sid = study(kind)
    bounds = release_bounds(coord_kit.config_of(signed))
    url = f"/v1/studies/{sid}/contributions"
    tail = bounds.lsh_tail if kind == "lsh" else bounds.grid_tail
    low = -tail if kind != "sparse grid" else bounds.threshold
    for value, status in ((low - 1, 422), (low, 201)):
        r = client.post(url, json=_contribution(coord_kit, signed, rng, kind, value),
                        headers=h.headers)
        assert r.status_code == status, (value, r.text)


def test_a_poked_lsh_table_total_is_refused(client, app, coord_kit, rng, study):
    signed, h, sid = study("lsh")
    config = coord_kit.config_of(signed)
    bounds = release_bounds(config)
    lsh = coord_kit.release(signed, rng)[1].copy()
    lsh[0] += bounds.table_tails[0] + max(bounds.table_tails[1:]) + 1  # within the cell bound
    before = table_rows(app)
    r = client.post(f"/v1/studies/{sid}/contributions",
                    json=coord_kit.release(signed, rng, lsh_values=lsh)[0], headers=h.headers)
    assert r.status_code == 422 and "total" in r.json()["detail"], r.text
    assert table_rows(app) == before


def _raw(values) -> str:
    return base64.b64encode(b"".join(struct.pack("<d", v) for v in values)).decode()


def _online_model(client) -> dict:
    model = client.get("/v1/studies/s1/online/model", headers=ADMIN).json()
    for key in ("weights", "average", "centre"):
        if model.get(key) is not None:
            assert np.all(np.isfinite(decode_vector(model[key], 4)))
    return model


@pytest.fixture
def online_members(make_participant):
    return [make_participant("h1", "1000", "0.001"), make_participant("h2", "1000", "0.001")]


@pytest.mark.parametrize("centring", [False, True], ids=["gradient", "centring"])
@pytest.mark.parametrize("value", FLOATS)
def test_extreme_online_sums_are_refused_and_change_nothing(
        client, app, coord_kit, online_members, centring, value):
    online = CENTRED if centring else ONLINE
    signed = create_study(client, coord_kit, online_members, online)
    h1 = online_members[0].headers
    window = 1 if centring else 0
    if centring:  # an honest centring release, then a first step
        assert client.post(URL, json=body(signed, "c", np.ones(4), 10, 0, online=online),
                           headers=h1).status_code == 201
    before = table_rows(app)
    doc = body(signed, "x", np.zeros(4), 10 if centring else 3, 0 if centring else window,
               online=online)
    doc["noisy_sum"] = _raw([value, value, -value, value])
    r = client.post(URL, json=doc, headers=online_members[1].headers)
    small = abs(value) < 1e3  # subnormal and -0.0 are honest values
    assert r.status_code == (201 if small else 422), r.text
    if not small:
        assert ("public bound" in r.json()["detail"] or "finite" in r.json()["detail"])
        assert table_rows(app) == before
    _online_model(client)
    ok = client.post(URL, json=body(signed, "y", np.ones(4), 2, window + 1, online=online),
                     headers=h1)
    assert ok.status_code == 201, ok.text  # the study goes on
    _online_model(client)


def test_the_measured_poisoning_release_is_refused_and_learning_goes_on(
        client, app, coord_kit, online_members):
    """Issue 25 item 3: ``[1e308, 1e308, -1e308, 1e308]`` was accepted and made the weights NaN."""
    signed = create_study(client, coord_kit, online_members, ONLINE)
    bound = online_release_bound(OnlineParams(**ONLINE), 3)
    doc = body(signed, "p", np.array([1e308, 1e308, -1e308, 1e308]), 3, 0, online=ONLINE)
    r = client.post(URL, json=doc, headers=online_members[1].headers)
    assert r.status_code == 422 and f"{bound:.6g}" in r.json()["detail"], r.text
    for window in (0, 1):
        ok = client.post(URL, json=body(signed, f"k{window}", np.ones(4), 2, window,
                                        online=ONLINE), headers=online_members[0].headers)
        assert (ok.status_code, ok.json()["model_version"]) == (201, window + 1), ok.text
    assert _online_model(client)["version"] == 2


def test_a_step_that_would_overflow_is_skipped_and_the_next_one_is_taken(
        client, coord_kit, online_members):
    """Public extremes (a step size of 1e307) can make an accepted release overflow a step:
    the weights keep their last value and the next release still steps."""
    online = {**ONLINE, "eta0": 1e307, "eta": 1e307}  # FLMB's and DP-FTRL's step size
    signed = create_study(client, coord_kit, online_members, online)
    h1 = online_members[0].headers
    big = 0.9 * online_release_bound(OnlineParams(**online), 1) / 2  # norm 2 big: inside
    assert big * 1e307 > np.finfo(np.float64).max  # the step overflows
    r = client.post(URL, json=body(signed, "a", np.full(4, big), 1, 0, online=online),
                    headers=h1)
    assert (r.status_code, r.json()["model_version"]) == (201, 0), r.text  # skipped
    model = _online_model(client)
    assert (model["version"], model["pending"]) == (0, 0)
    assert np.all(decode_vector(model["weights"], 4) == 0)
    budget = client.get("/v1/admin/budget", headers=ADMIN).json()
    assert {b["participant"]: b["epsilon_spent"] for b in budget}["h1"] != "0"  # charged
    r = client.post(URL, json=body(signed, "b", np.full(4, 1e-300), 1, 1, online=online),
                    headers=h1)
    assert (r.status_code, r.json()["model_version"]) == (201, 1), r.text
    _online_model(client)


@pytest.mark.parametrize("online", [ONLINE, CENTRED], ids=["gradient", "centring"])
def test_any_online_sum_is_a_201_or_a_422_and_never_poisons(
        client, coord_kit, online_members, online):
    signed = create_study(client, coord_kit, online_members, online)
    h1 = online_members[0].headers
    windows = iter(range(10**6))

    @settings(max_examples=30, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(values=st.lists(st.floats(width=64) | st.sampled_from(FLOATS), min_size=4,
                           max_size=4),
           count=st.integers(0, 10))
    def run(values, count):
        window = next(windows)
        doc = body(signed, f"w{window}", np.zeros(4), 10 if window == 0 else count, window,
                   online=online)
        doc["noisy_sum"] = _raw(values)
        r = client.post(URL, json=doc, headers=h1)
        assert r.status_code in OK, r.text
        _online_model(client)

    run()


@pytest.mark.parametrize("kind", list(GRIDS))
def test_any_int64_cell_is_a_201_or_a_422_never_a_5xx(client, coord_kit, study, kind):
    signed, h, sid = study(kind)

    @settings(max_examples=30, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(value=st.integers(-(2**63), 2**63 - 1) | st.sampled_from(INTS), seed=st.integers(0, 9))
    def run(value, seed):
        doc = _contribution(coord_kit, signed, np.random.default_rng(seed), kind, value)
        r = client.post(f"/v1/studies/{sid}/contributions", json=doc, headers=h.headers)
        assert r.status_code in OK, r.text
        _finite_models(client, sid)

    run()


def test_a_model_poisoned_before_the_bounds_learns_again(client, app, coord_kit, online_members):
    """A study whose weights were made NaN before this fix is served zeros and steps again."""
    from sqlalchemy.orm import Session

    from coordinator.db.online import OnlineModel

    signed = create_study(client, coord_kit, online_members, ONLINE)
    h1 = online_members[0].headers
    assert client.post(URL, json=body(signed, "a", np.ones(4), 2, 0, online=ONLINE),
                       headers=h1).status_code == 201
    with Session(app.state.engine) as s:
        model = s.get(OnlineModel, "s1")
        model.weights = model.average = _raw([math.nan] * 4)
        s.commit()
    assert np.all(decode_vector(_online_model(client)["weights"], 4) == 0)
    r = client.post(URL, json=body(signed, "b", np.ones(4), 2, 1, online=ONLINE), headers=h1)
    assert (r.status_code, r.json()["model_version"]) == (201, 2), r.text
    assert np.any(decode_vector(_online_model(client)["weights"], 4) != 0)
