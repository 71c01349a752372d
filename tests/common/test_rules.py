"""The public parameter rules read no data, and behave as their derivation says."""

from __future__ import annotations

import inspect
from decimal import Decimal

import numpy as np
import pytest

from common.detectors import GridKNN
from common.detectors.rules import (
    SIZES,
    TABLES,
    grid_rule,
    lsh_rule,
    occupied_snr,
    study_lsh,
)
from common.wire.schemas import StudyCreate
from coordinator.services.studies import grid_for, lsh_tables_for, scoring_for
from simulation import demo_data as dd
from simulation.hospitals import study_request

PUBLIC = {"d", "expected_records", "cohort_size", "epsilon", "mode", "h_min", "delta",
          "cell_limit"}


@pytest.mark.parametrize("rule", [lsh_rule, grid_rule])
def test_rules_accept_only_public_inputs(rule: object) -> None:
    assert set(inspect.signature(rule).parameters) <= PUBLIC  # type: ignore[arg-type]


def _dataset(seed: int, n: int = 400, d: int = 5) -> dd.Dataset:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * (seed + 1)
    X[0], X[1] = -50.0, 50.0  # same published bounds for both datasets
    y = (rng.random(n) < 0.05).astype(np.int8)
    return dd.Dataset(name="t", features=[f"f{i}" for i in range(d)], X=X, y=y)


@pytest.mark.parametrize("aggregation", ["independent", "secure"])
def test_study_creation_gives_the_same_parameters_for_different_data(aggregation: str) -> None:
    """Two datasets, same public inputs (schema bounds, cohort, declared records): the study
    the simulator creates gets the same tables and grid from the coordinator's rule."""
    chosen = []
    for seed in (0, 1):
        body = StudyCreate.model_validate(
            study_request(_dataset(seed), Decimal("0.1"), 10, aggregation))
        tables = lsh_tables_for(body)
        chosen.append((tables, grid_for(body), scoring_for(body, *tables)))
    assert chosen[0] == chosen[1]
    (m, s), _, scoring = chosen[0]
    assert scoring in ("log", "mass")
    assert (m, s) != (100, 16)  # the rule, not the schema's fallback defaults


def test_private_grid_rule_sizes_from_the_declaration_not_the_rows() -> None:
    rng = np.random.default_rng(2)
    small, large = rng.random((200, 4)), rng.random((3000, 4))
    kw = {"lo": np.zeros(4), "hi": np.ones(4), "epsilon": 1, "expected_records": 1000}
    a, b = GridKNN(**kw).fit(small), GridKNN(**kw).fit(large)
    assert a.k_ == b.k_ == 10 and a.spec_.bins == b.spec_.bins
    undeclared = {"lo": np.zeros(4), "hi": np.ones(4), "epsilon": 1}
    c, e = GridKNN(**undeclared).fit(small), GridKNN(**undeclared).fit(large)
    assert c.k_ == e.k_ == 10 and c.spec_.n_cells == e.spec_.n_cells <= 1_000_000


def test_lsh_rule_without_noise_is_the_paper() -> None:
    c = lsh_rule(d=3, expected_records=10)
    assert (c.n_tables, c.sample_size, c.scoring) == (100, 1000, "log")


def test_lsh_rule_scoring_follows_the_noise() -> None:
    clear = lsh_rule(d=5, expected_records=500, cohort_size=10, epsilon="0.1", mode="secure")
    assert clear.scoring == "log" and clear.n_tables <= 20  # target met, Z_eff < 10
    rich = lsh_rule(d=5, expected_records=10**6, cohort_size=10, epsilon="1")
    assert rich.scoring == "log" and rich.n_tables == 100
    drowned = lsh_rule(d=5, expected_records=5, cohort_size=10, epsilon="0.03")
    assert drowned.scoring == "mass"


def test_lsh_rule_keeps_the_target_and_prefers_depth() -> None:
    c = lsh_rule(d=12, expected_records=500, cohort_size=10, epsilon="0.1", mode="secure")
    assert c.snr >= 1.0
    assert c.sample_size == 1000  # 5,000 records with one draw afford the paper's depth
    deeper = [s for s in SIZES if s > c.sample_size]
    assert not deeper


def test_lsh_rule_is_monotone_in_the_signal() -> None:
    """More records, more epsilon or fewer noise draws never give smaller or fewer tables."""
    def key(**kw: object) -> tuple[int, int]:
        c = lsh_rule(d=5, **kw)  # type: ignore[arg-type]
        return c.sample_size, c.n_tables

    for eps_lo, eps_hi in (("0.03", "0.1"), ("0.1", "0.3"), ("0.3", "1")):
        assert key(expected_records=300, cohort_size=10, epsilon=eps_lo) <= key(
            expected_records=300, cohort_size=10, epsilon=eps_hi)
    for n_lo, n_hi in ((50, 500), (500, 50_000)):
        assert key(expected_records=n_lo, cohort_size=2, epsilon="0.1") <= key(
            expected_records=n_hi, cohort_size=2, epsilon="0.1")
    assert key(expected_records=300, cohort_size=10, epsilon="0.1", mode="independent") <= key(
        expected_records=300, cohort_size=10, epsilon="0.1", mode="secure")


def test_lsh_rule_limits() -> None:
    tiny = lsh_rule(d=5, expected_records=1, cohort_size=20, epsilon="0.01")
    assert (tiny.n_tables, tiny.sample_size) == (TABLES[-1], SIZES[-1]) and tiny.snr < 1
    assert tiny.scoring == "mass"
    huge = lsh_rule(d=5, expected_records=10**9, cohort_size=2, epsilon="1")
    assert (huge.n_tables, huge.sample_size) == (100, 1000)
    with pytest.raises(ValueError, match="epsilon"):
        lsh_rule(d=5, expected_records=10, epsilon="0")
    with pytest.raises(ValueError, match="expected_records"):
        lsh_rule(d=5, expected_records=0, epsilon="1")


def test_study_lsh_fills_only_what_is_unset() -> None:
    args = (Decimal("0.1"), 8, "secure", 10, 500)
    assert study_lsh(*args, n_tables=7, sample_size=9) == (7, 9)
    m, s = study_lsh(*args, sample_size=64)
    assert s == 64 and occupied_snr("0.1", "secure", 10, 500, m, 64) >= 1.0
    m, s = study_lsh(*args, n_tables=100)
    assert m == 100 and s in SIZES


def test_grid_rule_projects_many_features_and_scales_k() -> None:
    few = grid_rule(d=4, expected_records=1000)
    assert few.projection is None and few.k == 10 and few.bins == 8
    many = grid_rule(d=100, expected_records=100_000, cohort_size=2)
    assert many.projection == 6 and many.k == 2000
    private = grid_rule(d=9, expected_records=1000, cohort_size=10, epsilon="1")
    assert private.layout == "dense" and private.projection == 6
    noisy = grid_rule(d=3, expected_records=10, cohort_size=10, epsilon="0.01")
    assert not noisy.use and noisy.snr < 0.1
    rich = grid_rule(d=3, expected_records=10**6, cohort_size=10, epsilon="1")
    assert rich.use


def test_study_create_fills_the_grid_and_warns_when_it_is_noise(
        caplog: pytest.LogCaptureFixture) -> None:
    request = study_request(_dataset(0), Decimal("0.1"), 10)
    body = StudyCreate.model_validate(request)
    with caplog.at_level("WARNING", logger="fedod.studies"):
        grid = grid_for(body)
    assert grid is not None and (grid.bins, grid.k, grid.projection) == (8, 10, None)
    assert "consider leaving the grid out" in caplog.text  # 400 records over 8^3 cells
    kept = StudyCreate.model_validate({**request, "grid": {"bins": 3, "k": 7}})
    assert (grid_for(kept).bins, grid_for(kept).k) == (3, 7)  # type: ignore[union-attr]
