"""Sensitivities of the histograms and the discrete Laplace scale and spread (pure: no OpenDP).

One record moves an L1-``sensitivity`` vector by at most ``sensitivity``; discrete Laplace
noise of ``scale = sensitivity / epsilon`` on every entry makes the release epsilon-DP
(Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020).
:func:`lsh_sensitivity` and :func:`grid_sensitivity` state the sensitivities of the two
histograms, :func:`laplace_scale` the scale, exactly: the one place ``sensitivity / epsilon``
is written. :func:`laplace_scale_up` rounds it up to a float, where the OpenDP measurement
that draws the noise starts (:func:`common.noise.laplace.make_count_noise`); the poisoning
bounds of a release (:mod:`common.histograms.release_bounds`), the secure-sum checks, the
tail bounds (:mod:`common.noise.tails`) and noise floors use the same scale.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

__all__ = ["discrete_laplace_sd", "grid_sensitivity", "laplace_scale", "laplace_scale_up",
           "lsh_sensitivity"]


def lsh_sensitivity(n_tables: int, rows_per_id: int = 1) -> int:
    """L1 sensitivity of a flat LSH histogram: a record falls in one cell of each of the
    ``n_tables`` tables (Li & Pham), and a person with up to ``rows_per_id`` records moves
    ``n_tables * rows_per_id`` counts."""
    return n_tables * rows_per_id


def grid_sensitivity(rows_per_id: int = 1) -> int:
    """L1 sensitivity of a grid histogram: a record falls in one cell (Rauch, Olatunji &
    Khosla), a person with up to ``rows_per_id`` records in at most that many."""
    return rows_per_id


def laplace_scale(sensitivity: int, epsilon: Decimal) -> Fraction:
    """``sensitivity / epsilon``, exact."""
    return Fraction(sensitivity) / Fraction(epsilon)


def laplace_scale_up(sensitivity: int, epsilon: Decimal) -> float:
    """Smallest float ``scale >= sensitivity / epsilon`` (rounded up, never down)."""
    exact = laplace_scale(sensitivity, epsilon)
    scale = float(exact)
    while Fraction(scale) < exact:
        scale = math.nextafter(scale, math.inf)
    return scale


def discrete_laplace_sd(scale: float) -> float:
    """Standard deviation of the discrete Laplace of ``scale`` ``b``: with ``t = e^(-1/b)``,
    the variance is ``2 t / (1 - t)^2`` (Canonne, Kamath & Steinke, NeurIPS 2020)."""
    t = math.exp(-1.0 / scale)
    return math.sqrt(2.0 * t) / (1.0 - t)
