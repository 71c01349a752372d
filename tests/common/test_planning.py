"""Trust accounting (h_min), the signed cohort parameters and the table plan for the noise."""

from __future__ import annotations

import math
from decimal import Decimal
from types import SimpleNamespace

import numpy as np
import pytest
from pydantic import ValidationError

from common.hashing import derive_lsh_family
from common.noise import charged_epsilon, honest_minimum, min_survivors
from common.noise.planning import (
    GOOD_TABLES,
    MAX_TABLES,
    MIN_TABLES,
    TARGET_SNR,
    choose_tables,
    config_noise_warning,
    expected_cells,
    noise_draws,
    noise_warning,
    plan_lsh_tables,
    score_snr,
)
from common.secagg.params import AggregationParams


@pytest.mark.parametrize(
    ("n", "d", "t", "h", "survivors"),
    [(10, 0, 0, 10, 10), (10, 2, 1, 7, 8), (3, 1, 1, 1, 2), (1, 0, 0, 1, 1)],
)
def test_honest_minimum(n: int, d: int, t: int, h: int, survivors: int) -> None:
    assert honest_minimum(n, d, t) == h
    assert min_survivors(n, d, t) == survivors == h + t


@pytest.mark.parametrize(
    ("n", "d", "t", "match"),
    [(5, 3, 2, "honest survivors"), (2, 2, 0, "honest survivors"), (0, 0, 0, "cohort_size"),
     (5, -1, 0, "max_dropouts"), (5, 0, -1, "max_colluders"), (5, True, 0, "max_dropouts")],
)
def test_impossible_cohorts_are_refused(n: int, d: int, t: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        honest_minimum(n, d, t)


def test_charged_epsilon_is_the_study_epsilon() -> None:
    assert charged_epsilon("0.1") == Decimal("0.1")
    with pytest.raises(ValueError, match="positive"):
        charged_epsilon("0")


def test_aggregation_params() -> None:
    """The signed cohort parameters (the one ``AggregationParams``) agree with the accounting."""
    default = AggregationParams()
    assert (default.mode, default.h_min, default.max_colluders) == ("independent", None, 1)
    secure = AggregationParams(mode="secure", cohort_size=10, max_dropouts=2, max_colluders=1,
                               expected_records=500)
    assert (secure.h_min, secure.min_roster) == (honest_minimum(10, 2, 1), 8)
    assert secure.min_roster == min_survivors(10, 2, 1)
    assert AggregationParams.model_validate_json(secure.model_dump_json()) == secure


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"mode": "secure"}, "needs cohort_size"),
        ({"mode": "secure", "cohort_size": 1}, "needs cohort_size"),
        ({"mode": "secure", "cohort_size": 4, "max_dropouts": 2, "max_colluders": 2},
         "no honest participant"),
        ({"h_min": 1}, "secure aggregation only"),
        ({"mode": "secure", "cohort_size": "4"}, "valid integer"),
        ({"mode": "shared"}, "independent"),
        ({"expected_records": 0}, "greater than or equal"),
    ],
)
def test_aggregation_params_refused(fields: dict[str, object], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        AggregationParams.model_validate(fields)


@pytest.mark.parametrize("size", [4, 16, 64])
def test_expected_cells_matches_derived_families(size: int) -> None:
    family = derive_lsh_family(b"planning", [0.0] * 4, [1.0] * 4, 3000, size)
    assert family.n_cells / family.n_tables == pytest.approx(expected_cells(size), rel=0.04)


def test_noise_draws() -> None:
    assert noise_draws("independent", 10) == 10
    assert noise_draws("secure", 10) == 1
    assert noise_draws("secure", 10, 8) == pytest.approx(1.25)
    with pytest.raises(ValueError, match="h_min"):
        noise_draws("secure", 10, 11)


def test_score_snr_formula() -> None:
    """Z = N epsilon / (C sqrt(2 k m)), checked against the measured noise of a merge."""
    z = score_snr("0.5", "independent", 4, 1000, 25, 16)
    expect = 4000 * 0.5 / (expected_cells(16) * math.sqrt(2 * 4 * 25))
    assert z == pytest.approx(expect)


def test_rule_keeps_defaults_when_signal_is_ample() -> None:
    plan = choose_tables("1", "independent", 2, 50_000)
    assert (plan.n_tables, plan.sample_size) == (MAX_TABLES, 16)
    assert plan.snr >= TARGET_SNR and not plan.noise_dominated


def test_rule_reaches_the_target_snr_when_it_can() -> None:
    for records in (300, 1000, 3000):
        plan = choose_tables("0.1", "secure", 10, records)
        assert plan.snr >= TARGET_SNR
        assert plan.n_tables >= GOOD_TABLES or plan.sample_size == 4


def test_rule_floor_and_monotonicity() -> None:
    hopeless = choose_tables("0.01", "independent", 20, 50)
    assert (hopeless.n_tables, hopeless.sample_size) == (MIN_TABLES, 4)
    assert hopeless.noise_dominated
    sizes = [choose_tables(eps, "independent", 10, 700) for eps in ("0.03", "0.1", "0.3", "1")]
    weights = [p.n_tables * expected_cells(p.sample_size) for p in sizes]
    assert weights == sorted(weights)


def test_secure_choice_depends_on_total_records_not_on_p() -> None:
    """One noise draw: 2 x 3000 records and 20 x 300 records get the same tables."""
    a = choose_tables("0.1", "secure", 2, 3000)
    b = choose_tables("0.1", "secure", 20, 300)
    assert (a.n_tables, a.sample_size) == (b.n_tables, b.sample_size)
    indep = choose_tables("0.1", "independent", 20, 300)
    assert indep.n_tables * expected_cells(indep.sample_size) < a.n_tables * expected_cells(
        a.sample_size)


def test_warning_for_the_unseen_64_feature_case() -> None:
    """The issue's case: 10 hospitals of a few hundred records, epsilon 0.1 each, m = 100:
    warned that noise dominates, and not with the secure plan chosen for it."""
    text = noise_warning("0.1", "independent", 10, 200, 100, 16)
    assert text is not None and "dominated by noise" in text and "secure aggregation" in text
    plan = choose_tables("0.1", "secure", 10, 200)
    assert noise_warning("0.1", "secure", 10, 200, plan.n_tables, plan.sample_size) is None
    milder = noise_warning("0.1", "independent", 10, 700, 100, 16)
    assert milder is not None and milder.startswith("noise will cost accuracy")
    assert noise_warning("1", "independent", 2, 50_000, 100, 16) is None


def _config(epsilon: str, n_tables: int, sample_size: int, **agg: object) -> SimpleNamespace:
    return SimpleNamespace(
        privacy=SimpleNamespace(epsilon_lsh=Decimal(epsilon)),
        lsh=SimpleNamespace(n_tables=n_tables, sample_size=sample_size),
        aggregation=AggregationParams.model_validate(agg) if agg else None,
    )


def test_config_noise_warning_reads_public_fields_only() -> None:
    noisy = _config("0.1", 100, 16, cohort_size=10, expected_records=200)
    assert "dominated by noise" in (config_noise_warning(noisy) or "")
    assert config_noise_warning(_config("0.1", 100, 16)) is None  # nothing declared
    undeclared = _config("0.1", 100, 16, cohort_size=10)
    assert config_noise_warning(undeclared) is None
    given = AggregationParams(cohort_size=10, expected_records=500)
    assert config_noise_warning(_config("0.1", 100, 16), given) is not None


def test_plan_lsh_tables_respects_fixed_values() -> None:
    agg = AggregationParams(mode="secure", cohort_size=10, expected_records=300)
    chosen = choose_tables("0.1", "secure", 10, 300, agg.h_min)
    assert plan_lsh_tables("0.1", agg, None, None) == (chosen.n_tables, chosen.sample_size)
    assert plan_lsh_tables("0.1", agg, 70, 8) == (70, 8)
    assert plan_lsh_tables("0.1", agg, 70, None) == (70, 8)  # 70 tables: s = 16 too noisy
    assert plan_lsh_tables("0.1", agg, 10, None) == (10, 16)
    m, s = plan_lsh_tables("0.1", agg, None, 16)
    assert s == 16 and MIN_TABLES <= m <= MAX_TABLES
    assert plan_lsh_tables("0.1", None, None, None) == (100, 16)
    assert plan_lsh_tables("0.1", AggregationParams(), None, 8) == (100, 8)


def test_rule_uses_no_data() -> None:
    """The plan is a function of its public arguments: same inputs, same plan; no array."""
    args = ("0.3", "secure", 5, 400)
    assert choose_tables(*args) == choose_tables(*args)
    assert not any(isinstance(a, np.ndarray) for a in args)
