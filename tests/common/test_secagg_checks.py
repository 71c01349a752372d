"""The revealed-sum check (common.secagg.checks): honest sums pass, pokes past the noise tail
are refused, and any in-range int64 vector gets either a pass or the refusal, never another
error."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import SecureSumRejected
from common.noise import sample_noise_share
from common.secagg.checks import check_secure_sum, sum_bounds
from common.secagg.vector import noisy_secure_vector
from common.study.config import FeatureSpec, GridParams, PrivacyParams, new_study_config

FEATURES = [FeatureSpec(name=f"x{i}", lo=0.0, hi=1.0) for i in range(4)]
N = 5
CONFIG = new_study_config(
    "s1", FEATURES, privacy=PrivacyParams(epsilon_lsh="1", epsilon_grid="0.5"), n_tables=10,
    grid=GridParams(bins=3),
    aggregation={"mode": "secure", "cohort_size": N, "max_colluders": 1, "max_records": 1000},
)


def _honest_sum(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    fam, grid = CONFIG.lsh_family(), CONFIG.grid_spec()
    total = np.zeros(CONFIG.secure_cells, dtype=np.int64)
    for _ in range(N):
        X = rng.uniform(-0.2, 1.2, size=(int(rng.integers(0, 200)), 4))
        total += noisy_secure_vector(CONFIG, fam.histogram(X), grid.dense_counts(X),
                                     sample_noise_share)
    return total


def test_the_probe_config_wraps_a_50000_poke_to_848():
    assert CONFIG.secure_modulus_bits() == 14 and 50_000 % 2**14 == 848


@pytest.mark.parametrize("seed", range(20))
def test_honest_sums_pass(seed):
    check_secure_sum(CONFIG, _honest_sum(seed), N)


def test_a_poke_past_its_tables_tail_in_any_lsh_cell_is_rejected():
    total, bounds = _honest_sum(99), sum_bounds(CONFIG, N)
    for a, b in bounds.tables:
        others = CONFIG.lsh_cells - (b - a)
        poke = bounds.lsh_tail(b - a) + bounds.lsh_tail(others) + 1 + 2 * max(
            abs(int(total[a:b].sum()) - int(total[c:d].sum())) for c, d in bounds.tables)
        for cell in (a, b - 1):
            poked = total.copy()
            poked[cell] += poke
            with pytest.raises(SecureSumRejected, match="LSH table|outside"):
                check_secure_sum(CONFIG, poked, N)


@pytest.mark.parametrize("poke", [2**14, 2**20, -(2**13)])
def test_a_cell_out_of_range_is_rejected(poke):
    poked = _honest_sum(3)
    poked[CONFIG.lsh_cells + 5] += poke
    with pytest.raises(SecureSumRejected, match="outside"):
        check_secure_sum(CONFIG, poked, N)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from([-(2**63), -1, 0, 1, 999, 5000, 2**62, 2**63 - 1]),
                min_size=CONFIG.secure_cells, max_size=CONFIG.secure_cells))
def test_extreme_values_pass_or_are_refused_never_another_error(values):
    try:
        check_secure_sum(CONFIG, np.array(values, dtype=np.int64), N)
    except SecureSumRejected as exc:
        assert "revealed sum rejected" in exc.message
