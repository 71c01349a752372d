"""Statistical privacy checks on neighbouring datasets (issue 15, "How it is measured").

For neighbouring datasets ``D`` and ``D'`` and any event ``S`` on the output, an
``(epsilon, delta)``-DP mechanism satisfies ``P[M(D) in S] <= e^epsilon P[M(D') in S] + delta``
in both directions. :func:`check_dp` estimates both probabilities from independent draws and
fails when the data prove a violation: the Clopper-Pearson lower bound of one side exceeds
``e^epsilon`` times the upper bound of the other plus ``delta`` (each bound at confidence
``1 - 1e-6``, so a correct mechanism fails by chance about once in a million runs). The
events the tests use are the worst-case ones for discrete Laplace (the likelihood ratio is
``e^epsilon`` on them exactly), so a mechanism that spends more than it charges is caught.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import numpy as np
import pytest
from numpy.typing import NDArray
from scipy import stats

ALPHA = 1e-6

CheckDP = Callable[[NDArray[np.bool_], NDArray[np.bool_], Decimal | str, Decimal | str], None]


def bounds(hits: int, n: int, alpha: float = ALPHA) -> tuple[float, float]:
    """Two one-sided Clopper-Pearson bounds of a binomial proportion, each at ``1 - alpha``."""
    lo = 0.0 if hits == 0 else float(stats.beta.ppf(alpha, hits, n - hits + 1))
    hi = 1.0 if hits == n else float(stats.beta.ppf(1 - alpha, hits + 1, n - hits))
    return lo, hi


def check_dp(in_d: NDArray[np.bool_], in_d2: NDArray[np.bool_], epsilon: Decimal | str,
             delta: Decimal | str = "0") -> None:
    """Assert that event frequencies under ``D`` and ``D'`` do not prove a DP violation."""
    factor, dlt = float(np.exp(float(epsilon))), float(delta)
    a, b = bounds(int(in_d.sum()), in_d.size), bounds(int(in_d2.sum()), in_d2.size)
    assert a[0] <= factor * b[1] + dlt, f"P_D >= {a[0]:.5f} > e^eps * {b[1]:.5f} + {dlt}"
    assert b[0] <= factor * a[1] + dlt, f"P_D' >= {b[0]:.5f} > e^eps * {a[1]:.5f} + {dlt}"


@pytest.fixture
def dp_check() -> CheckDP:
    return check_dp


@pytest.fixture
def proportion_bounds() -> Callable[..., tuple[float, float]]:
    return bounds
