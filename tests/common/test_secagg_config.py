"""The signed study config names the aggregation mode and fixes the cohort parameters."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pydantic import ValidationError

from common.secagg.params import NOISE_TAIL_NATS, AggregationParams, modulus_bits
from common.study.config import (
    FeatureSpec,
    GridParams,
    PrivacyParams,
    canonical_json,
    new_study_config,
)
from common.study.signing import generate_key, sign_config, verify_config

FEATURES = [FeatureSpec(name=f"x{i}", lo=0.0, hi=1.0) for i in range(3)]
PRIVACY = PrivacyParams(epsilon_lsh=Decimal("0.1"))


def secure(**kw) -> AggregationParams:
    return AggregationParams(**{"mode": "secure", "cohort_size": 10, **kw})


def test_independent_config_keeps_its_canonical_form():
    config = new_study_config("s1", FEATURES, privacy=PRIVACY, n_tables=5)
    assert b"aggregation" not in canonical_json(config)
    assert config.aggregation_mode == "independent"
    plain = new_study_config(
        "s1", FEATURES, privacy=PRIVACY, n_tables=5, aggregation=AggregationParams()
    )
    assert plain.aggregation is None


def test_secure_config_is_signed_and_verified_with_its_cohort_parameters():
    key = generate_key()
    params = secure(max_dropouts=2, max_colluders=2)
    config = new_study_config("s1", FEATURES, privacy=PRIVACY, n_tables=5, aggregation=params)
    back = verify_config(sign_config(config, key), key.public_key())
    assert back.aggregation == params
    # n = 10: a sparse graph would need a threshold above 3k/4, so the graph is complete
    assert (back.aggregation.h_min, back.aggregation.degree, back.aggregation.threshold) == (
        6, 9, 5)
    assert back.secure_modulus_bits() == modulus_bits(params, 5, Decimal("0.1"))


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"cohort_size": None}, "needs cohort_size"),
        ({"h_min": 8}, "h_min must be n - dropouts - colluders = 9"),
        ({"max_dropouts": 5}, "cannot tolerate 5 dropouts"),
        ({"max_colluders": 0}, "greater than or equal to 1"),
        ({"cohort_size": 2}, "needs cohort_size"),
        ({"max_records": 2**41}, "less than or equal to"),
    ],
)
def test_bad_cohort_parameters_are_refused(kw, match):
    with pytest.raises(ValidationError, match=match):
        secure(**kw)


def test_independent_mode_may_declare_a_cohort_for_planning_only():
    declared = AggregationParams(cohort_size=5, expected_records=200)
    config = new_study_config("s1", FEATURES, privacy=PRIVACY, n_tables=5, aggregation=declared)
    assert config.aggregation == declared and config.aggregation_mode == "independent"
    assert b'"expected_records":200' in canonical_json(config)
    with pytest.raises(ValidationError, match="secure aggregation only"):
        AggregationParams(cohort_size=5, max_dropouts=1)


def test_secure_mode_takes_a_dense_grid():
    config = new_study_config(
        "s1", FEATURES, privacy=PrivacyParams(epsilon_lsh="0.1", epsilon_grid="0.1"),
        n_tables=5, grid=GridParams(bins=2), aggregation=secure(),
    )
    assert config.grid_layout == "dense" and config.secure_cells == config.lsh_cells + 2 ** 3


@pytest.mark.parametrize("n,eps,records", [(3, "1", 10), (20, "0.1", 10**6), (50, "0.01", 2**30)])
def test_word_size_holds_the_largest_sum(n, eps, records):
    params = secure(cohort_size=n, max_records=records)
    k = modulus_bits(params, 100, Decimal(eps))
    scale = 100 / float(eps)
    worst = n * records + scale * (2 * -(-n // params.h_min) + NOISE_TAIL_NATS)
    assert worst < 2 ** (k - 1)
    assert worst >= 2 ** (k - 3)  # no bit wasted (one sign bit, one for the bound's +1)


def test_word_size_fits_64_bits_at_the_extremes_the_config_allows():
    params = AggregationParams(
        mode="secure", cohort_size=1000, max_colluders=999, max_records=2**40
    )
    assert params.h_min == 1
    assert modulus_bits(params, 1000, Decimal("0.000000001")) <= 64
