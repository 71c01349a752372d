"""The secure vector (LSH tables, then the dense grid): noise per part, clipping, splitting,
and a statistical test of each part on neighbouring datasets."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest
from pydantic import ValidationError
from secagg_kit import max_log_ratio

from common.noise import sample_noise_share
from common.secagg.params import AggregationParams, modulus_bits
from common.secagg.vector import noisy_secure_vector, secure_parts, split_secure_sum
from common.study.config import FeatureSpec, GridParams, PrivacyParams, new_study_config

FEATURES = [FeatureSpec(name=f"x{i}", lo=0.0, hi=1.0) for i in range(4)]


def _config(*, n_tables=5, bins=3, eps_lsh="0.5", eps_grid="0.25", max_records=50,
            cell_limit=1_000_000, delta_grid="0"):
    secure = AggregationParams(mode="secure", cohort_size=3, max_colluders=1,
                               max_records=max_records)
    return new_study_config(
        "s1", FEATURES, privacy=PrivacyParams(epsilon_lsh=eps_lsh, epsilon_grid=eps_grid,
                                                delta_grid=delta_grid),
        n_tables=n_tables, grid=GridParams(bins=bins, cell_limit=cell_limit), aggregation=secure,
    )


def test_a_secure_study_releases_lsh_then_the_dense_grid_each_with_its_own_noise():
    config = _config()
    assert secure_parts(config) == [
        ("lsh", config.lsh_cells, 5, Decimal("0.5")),
        ("grid", 81, 1, Decimal("0.25")),
    ]
    assert config.secure_cells == config.lsh_cells + 81
    assert config.release_cost().epsilon == Decimal("0.75")
    calls = []

    def share(cells, sensitivity, epsilon, h_min):
        calls.append((cells, sensitivity, epsilon, h_min))
        return np.full(cells, 1000 * sensitivity, dtype=np.int64)

    lsh = np.arange(config.lsh_cells, dtype=np.int64)
    grid = np.arange(81, dtype=np.int64) * 3
    noisy = noisy_secure_vector(config, lsh, grid, share)
    assert calls == [(config.lsh_cells, 5, Decimal("0.5"), 2), (81, 1, Decimal("0.25"), 2)]
    back_lsh, back_grid = split_secure_sum(config, noisy)
    np.testing.assert_array_equal(back_lsh, np.minimum(lsh, 50) + 5000)  # clipped, then noise
    np.testing.assert_array_equal(back_grid, np.minimum(grid, 50) + 1000)
    with pytest.raises(ValueError, match="grid counts must have 81"):
        noisy_secure_vector(config, lsh, grid[:-1], share)
    with pytest.raises(ValueError, match="cells"):
        split_secure_sum(config, noisy[:-1])


def test_the_word_size_holds_both_parts():
    config = _config(eps_lsh="100", eps_grid="0.001")  # the grid's noise is the wider one
    params = config.aggregation
    assert config.secure_modulus_bits() == modulus_bits(params, 1, Decimal("0.001"))
    assert config.secure_modulus_bits() > modulus_bits(params, 5, Decimal("100"))


def test_a_sparse_grid_has_no_secure_form():
    with pytest.raises(ValidationError, match="dense grid only"):
        _config(bins=10, cell_limit=1000, delta_grid="1e-6")


def _released(config, extra: int, share) -> np.ndarray:
    """Two honest members (h_min = 2 in the worst case the parameters allow once the third,
    colluding member removed its own vector); the neighbouring dataset has one record more
    in every cell, each cell an independent trial of the one-cell mechanism."""
    total = 0
    for member in range(2):
        lsh = np.full(config.lsh_cells, 5 + extra * member, dtype=np.int64)
        grid = np.full(config.grid_cells, 5 + extra * member, dtype=np.int64)
        total = total + noisy_secure_vector(config, lsh, grid, share)
    return total


def _honest_pair(cells, sensitivity, epsilon, h_min):
    return sample_noise_share(cells, sensitivity, epsilon, 2)


def _half_sensitivity(cells, sensitivity, epsilon, h_min):
    return sample_noise_share(cells, max(1, sensitivity // 2), epsilon, 2)


@pytest.mark.parametrize("part", [0, 1])
def test_each_part_is_epsilon_dp_on_neighbouring_datasets(part):
    """LSH: m = 1000 tables at epsilon_lsh 1000 (scale 1, per-cell loss eps/m = 1); grid:
    sensitivity 1 at epsilon_grid 1 (scale 1). The per-cell likelihood ratio stays within
    e^(epsilon / sensitivity); a share drawn for half the LSH sensitivity is caught."""
    config = _config(n_tables=1000, bins=12, eps_lsh="1000", eps_grid="1", max_records=10**6)
    a, b = (split_secure_sum(config, _released(config, x, _honest_pair))[part] for x in (0, 1))
    ratio, slack = max_log_ratio(a, b)
    assert 0.5 <= ratio <= 1 + slack, (ratio, slack)
    if part == 0:
        a, b = (split_secure_sum(config, _released(config, x, _half_sensitivity))[0]
                for x in (0, 1))
        ratio, slack = max_log_ratio(a, b, min_count=100)
        assert ratio > 1 + slack, (ratio, slack)
