"""Tail bounds of the privacy noise: how far an honest release can stray from its exact value.

Every check that refuses a release because it is implausibly large ("poisoning bounds") adds one
of these bounds to the largest exact value public parameters allow. Each bound ``t`` holds with
probability at least ``1 - beta``; :data:`FAILURE_PROBABILITY` (``2**-40``) is the default, so an
honest release is refused by mistake with probability below ``2**-40`` per checked value. To
bound every entry of a vector at once, pass ``beta / entries`` (union bound).

- Discrete Laplace of scale ``s`` (``P(x) ∝ exp(-|x| / s)``, OpenDP's ``make_laplace`` on
  integers): ``P(|X| > u) = 2 q**(u + 1) / (1 + q) <= 2 exp(-u / s)`` with ``q = exp(-1 / s)``,
  so ``u = ceil(s ln(2 / beta))``. A sum of ``r`` draws exceeds ``r u`` only if one draw
  exceeds ``u``: union bound with ``beta / r`` each.
- Gaussian ``N(0, sigma**2)``: ``P(|X| > t) <= 2 exp(-t**2 / (2 sigma**2))`` (Chernoff).
- Its ``d``-dimensional l2 norm: ``||X||`` is 1-Lipschitz in ``X`` with ``E||X|| <= sigma
  sqrt(d)``, so ``P(||X|| > sigma (sqrt(d) + u)) <= exp(-u**2 / 2)`` (Gaussian concentration,
  e.g. Vershynin, *High-Dimensional Probability*, Thm 5.2.2 with the sharp constant of
  Boucheron-Lugosi-Massart, Thm 5.6).
- A sum of many cells of a secure sum (:func:`polya_sum_tail`): the noise of one cell is
  ``NB(r / h_min, q) - NB(r / h_min, q)`` (``r`` Pólya shares,
  :func:`common.noise.polya.sample_noise_share`), and the total over ``c`` cells is
  ``NB(a, q) - NB(a, q)`` with ``a = c r / h_min`` (negative binomials add in their shape).
  :func:`laplace_tail` bounds such a sum by ``ceil(a)`` times one draw's tail (a union bound),
  which grows linearly in ``a``: right for one cell, far too loose for a table of hundreds of
  cells, whose noise grows like ``sqrt(a)``. The exact moment generating function gives the
  bound instead (Chernoff; ``S`` is symmetric)::

      E exp(lambda S) = ((1 - q)**2 / ((1 - q e**lambda) (1 - q e**-lambda)))**a,
      P(|S| >= t) <= 2 min over 0 < lambda < -ln q of E exp(lambda S) e**(-lambda t)

  Any ``lambda`` gives a valid bound, so an inexact minimisation only loosens it; the result
  is never larger than the union bound, which is also valid.

Floating-point rounding is absorbed by a relative slack of 1e-9 and, for integer bounds, one
extra unit: every bound here is slightly larger than the mathematics needs, never smaller.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

__all__ = [
    "FAILURE_PROBABILITY",
    "laplace_tail",
    "gaussian_tail",
    "gaussian_norm_tail",
    "polya_sum_tail",
]

FAILURE_PROBABILITY = 2.0**-40
"""Default probability that an honest value falls outside its bound."""

_SLACK = 1 + 1e-9
_STEPS = 90  # golden-section steps over lambda: the bracket shrinks by 0.618**90 ~ 1e-19

Scale = float | int | Decimal | Fraction


def _beta(beta: float) -> float:
    if not 0 < beta < 1 or math.isnan(beta):
        raise ValueError(f"beta must be in (0, 1), got {beta}")
    return beta


def _positive(value: Scale, name: str) -> float:
    out = float(value)
    if not math.isfinite(out) or out <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {value}")
    return out


def laplace_tail(scale: Scale, *, draws: int = 1, beta: float = FAILURE_PROBABILITY) -> int:
    """An integer ``t`` with ``P(|S| > t) <= beta``, ``S`` a sum of ``draws`` independent
    discrete Laplace variables of ``scale`` (or any ``draws`` Laplace-equivalents, such as
    Pólya shares summing to ``NB(r) - NB(r)``)."""
    s = _positive(scale, "scale")
    if draws < 1:
        raise ValueError(f"draws must be >= 1, got {draws}")
    per_draw = math.ceil(s * math.log(2 * draws / _beta(beta)) * _SLACK) + 1
    return draws * per_draw


def gaussian_tail(sigma: Scale, *, beta: float = FAILURE_PROBABILITY) -> float:
    """``t`` with ``P(|X| > t) <= beta`` for ``X ~ N(0, sigma**2)``."""
    sd = _positive(sigma, "sigma")
    return sd * math.sqrt(2 * math.log(2 / _beta(beta))) * _SLACK


def gaussian_norm_tail(sigma: Scale, dim: int, *, beta: float = FAILURE_PROBABILITY) -> float:
    """``t`` with ``P(||X||_2 > t) <= beta`` for ``X ~ N(0, sigma**2 I_dim)``."""
    sd = _positive(sigma, "sigma")
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    return sd * (math.sqrt(dim) + math.sqrt(2 * math.log(1 / _beta(beta)))) * _SLACK


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
