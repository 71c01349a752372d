"""The discrete Laplace scale and spread, from public parameters only (pure: no OpenDP).

One record moves an L1-``sensitivity`` vector by at most ``sensitivity``; discrete Laplace
noise of ``scale = sensitivity / epsilon`` on every entry makes the release epsilon-DP
(Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020).
:func:`laplace_scale` states that once, exactly; the OpenDP measurement that draws the noise
(:func:`common.noise.laplace.make_count_noise`) rounds the same scale up to a float, and the
tail bounds (:mod:`common.noise.tails`) and noise floors use it.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

__all__ = ["discrete_laplace_sd", "laplace_scale"]


def laplace_scale(sensitivity: int, epsilon: Decimal) -> Fraction:
    """``sensitivity / epsilon``, exact."""
    return Fraction(sensitivity) / Fraction(epsilon)


def discrete_laplace_sd(scale: float) -> float:
    """Standard deviation of the discrete Laplace of ``scale`` ``b``: with ``t = e^(-1/b)``,
    the variance is ``2 t / (1 - t)^2`` (Canonne, Kamath & Steinke, NeurIPS 2020)."""
    t = math.exp(-1.0 / scale)
    return math.sqrt(2.0 * t) / (1.0 - t)
