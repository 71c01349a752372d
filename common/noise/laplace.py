"""The discrete Laplace mechanism and its calibration, from OpenDP only.

- :func:`make_count_noise` / :func:`add_discrete_laplace`: discrete Laplace (two-sided
  geometric) over an int64 vector, ``scale = sensitivity / epsilon`` rounded up, with the
  privacy map checked to be at most ``epsilon`` exactly (no float slack).
- :func:`make_threshold_noise`: thresholded discrete Laplace over a sparse ``{key: count}``
  map (OpenDP ``make_laplace_threshold``; Rogers, "A Unifying Privacy Analysis Framework for
  Unknown Domain Algorithms in Differential Privacy", 2023), sensitivity 1. OpenDP 0.16's map
  under-states delta by ``e^epsilon`` (opendp/opendp#2922), so the threshold is chosen by the
  map and the release uses one more; :func:`threshold_delta` checks it exactly.

OpenDP samples from a cryptographically secure source; never numpy or ``random``. What is
released with these (the LSH and grid histograms) is assembled in :mod:`common.histograms.release`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, Decimal, localcontext
from typing import Any

import numpy as np
import opendp.domains as dpd
import opendp.measurements as dpm
import opendp.metrics as dpx
from numpy.typing import NDArray
from opendp.mod import Measurement, enable_features

from common.budget import PrivacyBudget
from common.noise.scale import laplace_scale_up

__all__ = ["add_discrete_laplace", "make_count_noise", "make_threshold_noise", "threshold_delta"]

_MAX_THRESHOLD = 2**40

enable_features("contrib")  # submodules only: opendp.prelude would import scipy/sklearn


def _fit_map(build: Callable[[float], Measurement], scale: float, d_in: Any,
             eps: Decimal) -> tuple[Measurement, float]:
    """Build with ``scale``, nudged up by ulps until the privacy map's epsilon is <= ``eps``.

    The scale is already >= sensitivity / eps, so the true loss is within ``eps``; OpenDP's
    map rounds its float arithmetic up and may report ``eps`` plus an ulp, which is nudged
    away here so that what is charged is exactly what the map states, or more.
    """
    for _ in range(64):
        meas = build(scale)
        spent = meas.map(d_in)  # type: ignore[no-untyped-call]
        spent_eps = spent[0] if isinstance(spent, tuple) else spent
        if Decimal(spent_eps) <= eps:
            return meas, scale
        scale = math.nextafter(scale, math.inf)
    raise ValueError(f"cannot calibrate a mechanism to epsilon {eps}")


def make_count_noise(sensitivity: int, epsilon: Decimal | int | str) -> Measurement:
    """Discrete Laplace over an int64 vector with ``scale = sensitivity / epsilon``.

    The scale is rounded up, and the measurement's privacy map at ``sensitivity`` is checked
    to be at most ``epsilon`` exactly (no float slack).
    """
    eps = Decimal(str(epsilon))
    if not eps > 0:
        raise ValueError(f"epsilon must be positive, got {epsilon}")
    if sensitivity < 1:
        raise ValueError(f"sensitivity must be >= 1, got {sensitivity}")
    domain, metric = dpd.vector_domain(dpd.atom_domain(T="i64")), dpx.l1_distance(T="i64")
    meas, _ = _fit_map(lambda scale: dpm.make_laplace(domain, metric, scale=scale),
                       laplace_scale_up(sensitivity, eps), sensitivity, eps)
    return meas


def add_discrete_laplace(
    counts: NDArray[np.integer], sensitivity: int, epsilon: Decimal | int | str
) -> NDArray[np.int64]:
    """Return ``counts`` plus discrete Laplace noise of scale ``sensitivity / epsilon``."""
    meas = make_count_noise(sensitivity, epsilon)
    flat = np.asarray(counts, dtype=np.int64).ravel()
    noisy = meas([int(v) for v in flat])
    return np.asarray(noisy, dtype=np.int64).reshape(np.shape(counts))


def threshold_delta(scale: float, threshold: int) -> Decimal:
    """Exact upper bound (rounded up) of the delta of a sensitivity-1 thresholded release.

    OpenDP's ``make_laplace_threshold`` keeps a cell whose noisy count is ``>= threshold``. A
    cell holding one isolated record is absent from the neighbour without it, so it is
    released with probability ``P(1 + Z >= T) = P(Z >= T - 1) = e^{-(T-1) eps}/(1 + e^{-eps})``
    for discrete Laplace ``Z`` with ``eps = 1 / scale`` and ``T = threshold >= 2``: that
    is the true delta (every other cell is covered by epsilon). Evaluated at 60 digits with
    ``eps`` rounded down and the result inflated by 1e-50 relative, so it is never below the
    true value.
    """
    if threshold < 2:
        return Decimal(1)
    with localcontext() as ctx:
        ctx.prec = 60
        ctx.rounding = ROUND_FLOOR
        eps = Decimal(1) / Decimal(scale)
        ctx.rounding = ROUND_HALF_EVEN
        value = (-(threshold - 1) * eps).exp() / (1 + (-eps).exp())
        ctx.rounding = ROUND_CEILING
        return value * (1 + Decimal("1e-50"))


def make_threshold_noise(
    epsilon: Decimal | int | str, delta: Decimal | int | str
) -> tuple[Measurement, int]:
    """Thresholded discrete Laplace over a sparse ``{key: count}`` map, sensitivity 1.

    ``scale = 1 / epsilon`` (rounded up). Keys are strings (any width, see
    :mod:`common.histograms.cellkeys`), counts int64. OpenDP 0.16's map at ``(l0, l1, linf) = (1, 1,
    1)`` states ``P(Z >= T)`` while the mechanism keeps noisy counts ``>= T``, whose true delta is
    ``P(Z >= T - 1)`` (upstream opendp/opendp#2922, an ``e^epsilon`` under-count). So the
    smallest ``T0`` whose map meets ``delta`` is chosen and the release uses ``T = T0 + 1``:
    its true delta ``P(Z >= T0)`` is the map's value at ``T0``. The result is cross-checked
    against :func:`threshold_delta` in exact arithmetic. Returns the measurement and ``T``.
    """
    budget = PrivacyBudget(epsilon, delta)
    eps, dlt = budget.epsilon, budget.delta
    if eps <= 0:
        raise ValueError(f"epsilon must be positive, got {epsilon}")
    if not 0 < dlt < 1:
        raise ValueError(
            f"a sparse release needs 0 < delta < 1, got {delta}: noise on occupied cells "
            "without a threshold would reveal which cells hold records"
        )
    domain = dpd.map_domain(dpd.atom_domain(T="String"), dpd.atom_domain(T="i64"))
    metric = dpx.l01inf_distance(dpx.absolute_distance(T="i64"))

    def builder(threshold: int) -> Callable[[float], Measurement]:
        return lambda scale: dpm.make_laplace_threshold(
            domain, metric, scale=scale, threshold=threshold)

    _, scale = _fit_map(builder(1), laplace_scale_up(1, eps), (1, 1, 1), eps)

    def meets(threshold: int) -> bool:
        _, map_delta = builder(threshold)(scale).map((1, 1, 1))  # type: ignore[no-untyped-call]
        return Decimal(map_delta) <= dlt

    hi = 1
    while not meets(hi):
        hi *= 2
        if hi > _MAX_THRESHOLD:
            raise ValueError(f"no threshold meets delta {dlt} at epsilon {eps}")
    lo = hi // 2  # meets(lo) is False, or lo == 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if meets(mid):
            hi = mid
        else:
            lo = mid
    release_threshold = hi + 1
    true_delta = threshold_delta(scale, release_threshold)
    if true_delta > dlt:
        raise ValueError(f"threshold {release_threshold} spends delta {true_delta} > {dlt}")
    return builder(release_threshold)(scale), release_threshold
