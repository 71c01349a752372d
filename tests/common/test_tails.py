"""Noise tail bounds: each holds against the exact distribution and is not loose."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from common.noise.tails import (
    FAILURE_PROBABILITY,
    gaussian_norm_tail,
    gaussian_tail,
    laplace_tail,
)


def _laplace_exceeds(scale: float, t: int) -> float:
    """Exact P(|X| > t) for a discrete Laplace of ``scale``."""
    q = math.exp(-1 / scale)
    return 2 * q ** (t + 1) / (1 + q)


@pytest.mark.parametrize("scale", [0.5, 1, 10, 1000, 1e5, Decimal("100.0"), Fraction(7, 3)])
@pytest.mark.parametrize("beta", [1e-2, 1e-6, FAILURE_PROBABILITY])
def test_laplace_tail_holds_and_is_tight(scale: float, beta: float) -> None:
    t = laplace_tail(scale, beta=beta)
    assert _laplace_exceeds(float(scale), t) <= beta
    assert t <= float(scale) * math.log(2 / beta) + 3  # within a few units of the bound


@pytest.mark.parametrize("draws", [1, 2, 7, 20])
def test_laplace_sum_tail_holds(draws: int) -> None:
    scale, beta = 5.0, 1e-3
    t = laplace_tail(scale, draws=draws, beta=beta)
    # Exact pmf of the sum by convolution on a window wide enough to hold it.
    width = 2 * t
    q = math.exp(-1 / scale)
    ks = np.arange(-width, width + 1)
    one = (1 - q) / (1 + q) * q ** np.abs(ks)
    pmf = one
    for _ in range(draws - 1):
        pmf = np.convolve(pmf, one)[width: 3 * width + 1]
    assert 1 - pmf[width - t: width + t + 1].sum() <= beta


@pytest.mark.parametrize("sigma", [1e-3, 1.0, 37.5, 1e6])
@pytest.mark.parametrize("beta", [1e-2, FAILURE_PROBABILITY])
def test_gaussian_tail_holds(sigma: float, beta: float) -> None:
    t = gaussian_tail(sigma, beta=beta)
    assert 2 * stats.norm.sf(t / sigma) <= beta
    assert 2 * stats.norm.sf(0.75 * t / sigma) > beta  # not loose by a third


@pytest.mark.parametrize("dim", [1, 2, 10, 785, 10_000])
@pytest.mark.parametrize("beta", [1e-2, FAILURE_PROBABILITY])
def test_gaussian_norm_tail_holds(dim: int, beta: float) -> None:
    sigma = 3.0
    t = gaussian_norm_tail(sigma, dim, beta=beta)
    assert stats.chi.sf(t / sigma, dim) <= beta


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: laplace_tail(0), "scale"),
        (lambda: laplace_tail(-1.0), "scale"),
        (lambda: laplace_tail(float("nan")), "scale"),
        (lambda: laplace_tail(1, draws=0), "draws"),
        (lambda: laplace_tail(1, beta=0.0), "beta"),
        (lambda: laplace_tail(1, beta=1.0), "beta"),
        (lambda: gaussian_tail(float("inf")), "sigma"),
        (lambda: gaussian_norm_tail(1, 0), "dim"),
    ],
)
def test_bad_arguments_are_refused(call: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()  # type: ignore[operator]
