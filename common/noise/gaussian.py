"""Discrete Gaussian noise for the DPM leaf histograms (``leaf_noise="gaussian"``, docs/COHORTS.md)
and the k-means per-cluster sums (``sum_noise="gaussian"``, :mod:`common.cohorts.kmeans`).

Why. A leaf's histograms cover all ``d`` features; one record adds 1 to one interval of each,
so the vector moves by ``d`` in L1 but only ``sqrt(d)`` in L2. Laplace noise pays for the
L1 figure (scale ``d / epsilon``); Gaussian noise pays for the L2 one, which on Synth-100d is
10 instead of 100.

Sensitivity (add/remove one record): L2 ``sqrt(d)`` over one leaf release's histograms (the
leaves partition the box, so only the record's own leaf changes). OpenDP's integer L2 metric
takes integer distances, so the privacy map is evaluated at ``ceil(sqrt(d))``
(:func:`l2_sensitivity`): exact when ``d`` is a square (100), conservative otherwise.

Mechanism. OpenDP's ``make_gaussian`` over an integer vector: the discrete Gaussian, sampled
exactly from a CSPRNG. It is ``rho``-zCDP with ``rho = l2**2 / (2 scale**2)``; OpenDP's
``make_zCDP_to_approxDP`` turns that into the ``(epsilon, delta)`` charged. The scale is the
smallest (to a relative 1e-6, :func:`common.noise.gradient.gaussian_scale`) whose converted
epsilon at ``delta`` is within the budget, then checked on the integer measurement itself.

delta. ``1 / (n sqrt(n))`` for a *declared*, public ``n`` (the signed config's
``declared_n``, never a count of records), rounded down to the ledger's 1e-18 quantum.

Any other integer vector with a stated integer L2 sensitivity (the k-means sums: the
fixed-point half-diagonal of the box) goes through :func:`l2_scale` and
:func:`add_gaussian`; the histogram functions are their ``l2 = ceil(sqrt(d))`` case.
"""

from __future__ import annotations

import math
from decimal import ROUND_FLOOR, Decimal, localcontext
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray
from opendp import domains as dpd
from opendp import measurements as dpm
from opendp import metrics as dpx
from opendp.combinators import make_zCDP_to_approxDP
from opendp.mod import Measurement, enable_features

from common.budget import DELTA_QUANTUM

__all__ = ["add_discrete_gaussian", "add_gaussian", "declared_delta", "gaussian_epsilon",
           "histogram_scale", "l2_epsilon", "l2_scale", "l2_sensitivity"]

enable_features("contrib")


def declared_delta(n: int) -> Decimal:
    """``1 / (n sqrt(n))`` rounded down to 1e-18, for a declared (public) ``n >= 2``."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"declared n must be an integer >= 2, got {n!r}")
    with localcontext() as ctx:
        ctx.prec = 50
        exact = Decimal(1) / (Decimal(n) * Decimal(n).sqrt())
        delta = exact.quantize(DELTA_QUANTUM, rounding=ROUND_FLOOR)
    if delta <= 0:
        raise ValueError(f"declared n {n} gives a delta under 1e-18")
    return delta


def l2_sensitivity(d: int) -> int:
    """``ceil(sqrt(d))``: the integer L2 distance the privacy map is evaluated at."""
    if d < 1:
        raise ValueError(f"d must be >= 1, got {d}")
    return math.isqrt(d - 1) + 1


def _measurement(scale: float) -> Measurement:
    domain = dpd.vector_domain(dpd.atom_domain(T="i64"))
    return dpm.make_gaussian(domain, dpx.l2_distance(T="i64"), scale=scale)


def l2_epsilon(l2: int, scale: float, delta: Decimal) -> float:
    """Epsilon at ``delta`` of the integer Gaussian of ``scale`` on a vector whose integer
    L2 sensitivity is ``l2``, from OpenDP's own privacy map."""
    profile = make_zCDP_to_approxDP(_measurement(scale)).map(l2)  # type: ignore[no-untyped-call]
    return float(profile.epsilon(float(delta)))


def gaussian_epsilon(d: int, scale: float, delta: Decimal) -> float:
    """Epsilon at ``delta`` of the integer Gaussian of ``scale`` on ``d`` features' histograms,
    from OpenDP's own privacy map."""
    return l2_epsilon(l2_sensitivity(d), scale, delta)


@lru_cache(maxsize=64)
def l2_scale(l2: int, epsilon: Decimal, delta: Decimal) -> float:
    """Smallest scale (to a relative 1e-6) whose epsilon at ``delta`` is at most ``epsilon``
    at integer L2 sensitivity ``l2``, checked on the integer measurement (nudged up until
    OpenDP's map agrees)."""
    from common.noise.gradient import gaussian_scale  # imports opendp.prelude: only when used

    if isinstance(l2, bool) or not isinstance(l2, int) or l2 < 1:
        raise ValueError(f"l2 must be a positive integer, got {l2!r}")
    scale = gaussian_scale(float(l2), float(epsilon), float(delta))
    for _ in range(64):
        if Decimal(l2_epsilon(l2, scale, delta)) <= epsilon:
            return scale
        scale *= 1 + 1e-9
    raise ValueError(f"cannot calibrate the Gaussian to epsilon {epsilon} at delta {delta}")


def histogram_scale(d: int, epsilon: Decimal, delta: Decimal) -> float:
    """:func:`l2_scale` for ``d`` features' histograms (``l2 = ceil(sqrt(d))``)."""
    return l2_scale(l2_sensitivity(d), epsilon, delta)


def add_gaussian(values: ArrayLike, l2: int, epsilon: Decimal,
                 delta: Decimal) -> NDArray[np.int64]:
    """``values`` (one release, integer L2 sensitivity ``l2``) plus one discrete Gaussian
    draw per entry at :func:`l2_scale`; call once per release."""
    flat = np.asarray(values, dtype=np.int64).ravel()
    meas = _measurement(l2_scale(l2, epsilon, delta))
    noisy = meas([int(v) for v in flat])
    return np.asarray(noisy, dtype=np.int64).reshape(np.shape(values))


def add_discrete_gaussian(values: ArrayLike, d: int, epsilon: Decimal,
                          delta: Decimal) -> NDArray[np.int64]:
    """``values`` (one leaf release's histograms over ``d`` features) plus one discrete
    Gaussian draw per entry at :func:`histogram_scale`; call once per release."""
    return add_gaussian(values, l2_sensitivity(d), epsilon, delta)
