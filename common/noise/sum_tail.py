"""A Chernoff tail bound for the total noise of many cells of a revealed secure sum.

The noise of a secure sum in one cell is ``NB(r / h_min, q) - NB(r / h_min, q)`` (``r`` Pólya
shares, :func:`common.noise.sample_noise_share`), and the total over ``c`` cells is
``NB(a, q) - NB(a, q)`` with ``a = c r / h_min`` (negative binomials add in their shape).
:func:`common.noise.tails.laplace_tail` bounds such a sum by ``ceil(a)`` times one draw's tail
(a union bound), which grows linearly in ``a``: right for one cell, far too loose for a table
of hundreds of cells, whose noise grows like ``sqrt(a)``. Here the exact moment generating
function gives the bound instead:

    E exp(lambda S) = ((1 - q)**2 / ((1 - q e**lambda) (1 - q e**-lambda)))**a,
    P(|S| >= t) <= 2 min over 0 < lambda < -ln q of E exp(lambda S) e**(-lambda t)

(Chernoff; ``S`` is symmetric). Any ``lambda`` gives a valid bound, so an inexact minimisation
only loosens it; the result is never larger than the union bound, which is also valid.
Floating-point rounding is absorbed as in :mod:`common.noise.tails` (relative slack 1e-9 and
one extra unit).
"""

from __future__ import annotations

import math
from fractions import Fraction

from common.noise.tails import FAILURE_PROBABILITY, laplace_tail

__all__ = ["polya_sum_tail"]

_SLACK = 1 + 1e-9
_STEPS = 90  # golden-section steps over lambda: the bracket shrinks by 0.618**90 ~ 1e-19


def _log_mgf(lam: float, shape: float, inv_scale: float) -> float:
    """``ln E exp(lam S)`` for ``S = NB(shape, q) - NB(shape, q)``, ``q = exp(-inv_scale)``."""
    log_1mq = math.log(-math.expm1(-inv_scale))
    up = math.log(-math.expm1(lam - inv_scale))  # ln(1 - q e**lam)
    down = math.log(-math.expm1(-lam - inv_scale))  # ln(1 - q e**-lam)
    return shape * (2 * log_1mq - up - down)


def _log_tail(t: int, shape: float, inv_scale: float) -> float:
    """``ln`` of the Chernoff bound on ``P(S >= t)`` (minimised over lambda, golden section:
    the exponent is convex in lambda)."""
    lo, hi = 0.0, inv_scale
    golden = (math.sqrt(5) - 1) / 2

    def g(lam: float) -> float:
        return _log_mgf(lam, shape, inv_scale) - lam * t

    a, b = hi - golden * (hi - lo), lo + golden * (hi - lo)
    ga, gb = g(a), g(b)
    for _ in range(_STEPS):
        if ga < gb:
            hi, b, gb = b, a, ga
            a = hi - golden * (hi - lo)
            ga = g(a)
        else:
            lo, a, ga = a, b, gb
            b = lo + golden * (hi - lo)
            gb = g(b)
    return min(ga, gb, 0.0)


def polya_sum_tail(
    scale: float | Fraction, shape: Fraction | int, *, beta: float = FAILURE_PROBABILITY
) -> int:
    """An integer ``t`` with ``P(|S| > t) <= beta`` for ``S = NB(shape, q) - NB(shape, q)``,
    ``q = exp(-1 / scale)``: the noise of ``shape * h_min`` Pólya shares of ``scale``.

    Parameters
    ----------
    scale : float | Fraction
        Discrete Laplace scale ``sensitivity / epsilon`` of the shares.
    shape : Fraction | int
        Total shape: cells times members over ``h_min`` (> 0).
    beta : float
        Failure probability (default ``2**-40``).
    """
    s, a = float(scale), float(shape)
    if not math.isfinite(s) or s <= 0 or not math.isfinite(a) or a <= 0:
        raise ValueError(f"scale and shape must be finite and > 0, got {scale}, {shape}")
    union = laplace_tail(s, draws=math.ceil(Fraction(shape)), beta=beta)
    target = math.log(beta / 2)
    lo, hi = 0, union  # P(|S| > union) <= beta already
    while lo < hi:  # smallest t whose Chernoff bound on P(|S| >= t) is <= beta
        mid = (lo + hi) // 2
        if _log_tail(mid, a, 1 / s) <= target:
            hi = mid
        else:
            lo = mid + 1
    return min(union, math.ceil(lo * _SLACK) + 1)
