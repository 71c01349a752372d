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

Floating-point rounding is absorbed by a relative slack of 1e-9 and, for integer bounds, one
extra unit: every bound here is slightly larger than the mathematics needs, never smaller.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

__all__ = ["FAILURE_PROBABILITY", "laplace_tail", "gaussian_tail", "gaussian_norm_tail"]

FAILURE_PROBABILITY = 2.0**-40
"""Default probability that an honest value falls outside its bound."""

_SLACK = 1 + 1e-9

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
