"""Statistical privacy test of the whole secure release on neighbouring datasets.

Worst case the signed parameters allow (n = 4, D = 1, T = 1, so h_min = 2): one member is lost
before masking, the round runs with 3, and a colluding member subtracts its own noisy vector
from the revealed sum. What is left is the two honest members' counts plus their two noise
shares. Each of the 20 000 cells is an independent trial of the one-cell mechanism
(sensitivity 1, epsilon 1): in the neighbouring dataset one honest member has one record
more in every cell. The whole protocol runs (masks, unmask answers, reveal), and the
empirical likelihood ratio of every well-populated output value must stay within e^epsilon.
A deliberately mis-sized share (drawn for h = 4 while only 2 honest shares remain) is caught.
"""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pytest
from secagg_kit import Cohort, max_log_ratio

from common.noise import sample_noise_share

CELLS = 20_000
EPS = Decimal(1)


def _observed(extra: int, share_h: int) -> np.ndarray:
    cohort = Cohort.make(4, max_dropouts=1, max_colluders=1, k=32)
    names = sorted(cohort.members)[:3]  # the fourth was lost before masking
    base = np.full(CELLS, 5, dtype=np.int64)
    vectors = {
        names[0]: base + sample_noise_share(CELLS, 1, EPS, share_h),  # the colluder
        names[1]: base + extra + sample_noise_share(CELLS, 1, EPS, share_h),
        names[2]: base + sample_noise_share(CELLS, 1, EPS, share_h),
    }
    cohort.members = {n: cohort.members[n] for n in names}
    total = cohort.run(vectors)
    np.testing.assert_array_equal(total, sum(vectors.values()))
    return total - vectors[names[0]]  # the colluder removes its own vector


def test_secure_release_is_epsilon_dp_on_neighbouring_datasets():
    ratio, slack = max_log_ratio(_observed(0, 2), _observed(1, 2))
    assert ratio <= float(EPS) + slack, (ratio, slack)
    assert ratio >= 0.5 * float(EPS)  # the test sees the mechanism's actual ratio


@pytest.mark.parametrize("share_h", [4])
def test_a_mis_sized_share_is_caught(share_h):
    """Shares sized for 4 honest members when only 2 remain carry half a Laplace."""
    ratio, slack = max_log_ratio(_observed(0, share_h), _observed(1, share_h))
    assert ratio > float(EPS) + slack, (ratio, slack)
    assert math.isfinite(ratio)
