"""Differentially private release of integer count vectors, noise from OpenDP only.

Every function here draws its noise from OpenDP's discrete Laplace (two-sided geometric)
mechanism, which samples from a cryptographically secure source. Never numpy or ``random``.

- :func:`release_lsh`: all ``m`` LSH tables count every local record, so adding or removing
  one record changes one cell per table: L1 sensitivity ``m``. Every cell, empty or not, gets
  discrete Laplace noise of ``scale = m / epsilon``; pure epsilon-DP.
- :func:`release_grid`: one grid has sensitivity 1. Up to ``cell_limit`` cells it is released
  densely (noise on every cell, ``scale = 1 / epsilon``, pure epsilon-DP). Above, only occupied
  cells are noised and cells whose noisy count falls below a threshold are dropped
  (OpenDP ``make_laplace_threshold``; Rogers, "A Unifying Privacy Analysis Framework for
  Unknown Domain Algorithms in Differential Privacy", 2023): (epsilon, delta)-DP over an
  unknown domain of cell keys of any width (:mod:`common.cellkeys`). OpenDP 0.16's map
  under-states delta by ``e^epsilon`` (opendp/opendp#2922), so the threshold is chosen by the
  map and the release uses one more; :func:`threshold_delta` checks it exactly.

Scales are rounded up so that the true loss never exceeds the epsilon charged. Counts may
be all zero (an empty dataset releases noise only) and a sparse release of no cells is
valid. Nothing here depends on the data for success once the mechanism is built: keys come
from :class:`~common.grid.GridSpec`, which fits every cell the config allows.

The noise is drawn once; a :class:`Release` is immutable and is what a retry re-sends.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, Decimal, localcontext
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import opendp.domains as dpd
import opendp.measurements as dpm
import opendp.metrics as dpx
from numpy.typing import ArrayLike, NDArray
from opendp.mod import Measurement, enable_features

from common.budget import PrivacyBudget
from common.cellkeys import as_keys, key_strings, key_words, keys_from_strings, keys_problem

if TYPE_CHECKING:
    from common.grid import GridSpec
    from common.hashing import LSHFamily

__all__ = [
    "Release",
    "make_count_noise",
    "make_threshold_noise",
    "threshold_delta",
    "add_discrete_laplace",
    "release_lsh",
    "release_grid",
]

_MAX_THRESHOLD = 2**40

enable_features("contrib")  # submodules only: opendp.prelude would import scipy/sklearn


def _scale(sensitivity: int, eps: Decimal) -> float:
    """Smallest float ``scale >= sensitivity / eps`` (rounded up, never down)."""
    with localcontext() as ctx:
        ctx.prec = 60
        exact = Decimal(sensitivity) / eps
        scale = float(exact)
        while Decimal(scale) < exact:
            scale = math.nextafter(scale, math.inf)
    return scale


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
                       _scale(sensitivity, eps), sensitivity, eps)
    return meas


def add_discrete_laplace(
    counts: NDArray[np.integer], sensitivity: int, epsilon: Decimal | int | str
) -> NDArray[np.int64]:
    """Return ``counts`` plus discrete Laplace noise of scale ``sensitivity / epsilon``."""
    meas = make_count_noise(sensitivity, epsilon)
    flat = np.asarray(counts, dtype=np.int64).ravel()
    noisy = meas([int(v) for v in flat])
    return np.asarray(noisy, dtype=np.int64).reshape(np.shape(counts))


@dataclass(frozen=True, eq=False)
class Release:
    """One noisy release, drawn once: the values are read-only and never re-noised.

    A retried upload re-sends this same object's encoding; drawing again would double the
    privacy cost (DESIGN 2).

    Attributes
    ----------
    kind : "lsh" | "grid"
    layout : "dense" | "sparse"
        Dense: ``values`` has ``n_cells`` entries. Sparse: ``values[i]`` belongs to the cell
        with key ``indices[i]``, keys strictly increasing; absent cells were below the
        threshold.
    n_cells : int
    values : ndarray of int64, read-only
    indices : ndarray (nnz, W) of int64, read-only, or None when dense
        Cell keys, ``W = key_words(n_cells)`` 63-bit words each (:mod:`common.cellkeys`).
    cost : PrivacyBudget
        What this release spends (epsilon, and delta for a sparse grid).
    """

    kind: Literal["lsh", "grid"]
    layout: Literal["dense", "sparse"]
    n_cells: int
    values: NDArray[np.int64]
    indices: NDArray[np.int64] | None
    cost: PrivacyBudget

    def __post_init__(self) -> None:
        values = np.array(self.values, dtype=np.int64)
        values.setflags(write=False)
        object.__setattr__(self, "values", values)
        if self.layout == "dense":
            if self.indices is not None or values.shape != (self.n_cells,):
                raise ValueError(f"a dense release needs {self.n_cells} values and no indices")
        else:
            if self.indices is None:
                raise ValueError("a sparse release needs indices")
            indices = as_keys(self.indices, key_words(self.n_cells)).copy()
            indices.setflags(write=False)
            problem = keys_problem(indices, self.n_cells)
            if indices.shape[0] != values.shape[0] or problem:
                raise ValueError(f"sparse indices must match values: {problem or 'lengths'}")
            object.__setattr__(self, "indices", indices)


def _positive(epsilon: Decimal | int | str) -> PrivacyBudget:
    budget = PrivacyBudget(epsilon)
    if budget.epsilon <= 0:
        raise ValueError(f"epsilon must be positive, got {epsilon}")
    return budget


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
    :mod:`common.cellkeys`), counts int64. OpenDP 0.16's map at ``(l0, l1, linf) = (1, 1, 1)``
    states ``P(Z >= T)`` while the mechanism keeps noisy counts ``>= T``, whose true delta is
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

    _, scale = _fit_map(builder(1), _scale(1, eps), (1, 1, 1), eps)

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


def release_lsh_counts(
    counts: ArrayLike, n_tables: int, epsilon: Decimal | int | str
) -> Release:
    """Noisy release of an exact flat LSH histogram, ``scale = n_tables / epsilon``.

    ``counts`` must count every record once in each of the ``n_tables`` tables (no fixed-size
    subsampling, which would break the sensitivity bound); every cell is noised (epsilon-DP).
    Exact counts may be accumulated chunk by chunk before this single noise draw.
    """
    cost = _positive(epsilon)
    exact = np.asarray(counts, dtype=np.int64)
    noisy = add_discrete_laplace(exact, n_tables, cost.epsilon)
    return Release("lsh", "dense", int(exact.size), noisy, None, cost)


def release_grid_counts(
    counts: ArrayLike | tuple[ArrayLike, ArrayLike],
    n_cells: int,
    epsilon: Decimal | int | str,
    delta: Decimal | int | str = 0,
    sensitivity: int = 1,
) -> Release:
    """Noisy release of exact grid counts.

    ``counts`` is either the dense vector of all ``n_cells`` cells (every cell, empty ones too,
    gets discrete Laplace noise of scale ``sensitivity / epsilon``; ``delta`` must be 0) or a
    pair ``(cells, counts)`` of the occupied cells, released with the thresholded mechanism
    (:func:`make_threshold_noise`; ``delta`` > 0 and part of the cost). ``sensitivity`` is the
    most cells' counts one person can change in total: 1 for one row per person, N when a
    person may have N rows; the sparse mechanism is calibrated for 1 only.
    """
    cost = PrivacyBudget(epsilon, delta)
    _positive(epsilon)
    if not isinstance(counts, tuple):
        if cost.delta != 0:
            raise ValueError("a dense grid release is pure epsilon-DP; pass delta=0")
        exact = np.asarray(counts, dtype=np.int64)
        if exact.size != n_cells:
            raise ValueError(f"dense grid counts must have {n_cells} cells, got {exact.size}")
        return Release("grid", "dense", n_cells,
                       add_discrete_laplace(exact, sensitivity, cost.epsilon), None, cost)
    if sensitivity != 1:
        raise ValueError("a sparse grid is released only with one row per person "
                         f"(sensitivity 1, not {sensitivity})")
    meas, _ = make_threshold_noise(cost.epsilon, cost.delta)
    words = key_words(n_cells)
    keys = as_keys(counts[0], words)
    exact = np.asarray(counts[1], dtype=np.int64).ravel()
    if keys.shape[0] != exact.size:
        raise ValueError("sparse grid counts: keys and counts differ in length")
    released: dict[str, int] = meas(dict(zip(key_strings(keys), exact.tolist(), strict=True)))
    names = sorted(released)  # fixed-width big-endian hex: string order is key order
    out = np.array([released[k] for k in names], dtype=np.int64)
    return Release("grid", "sparse", n_cells, out, keys_from_strings(names, words), cost)


def release_lsh(family: LSHFamily, X: ArrayLike, epsilon: Decimal | int | str) -> Release:
    """:func:`release_lsh_counts` of the histogram of all records ``X`` in all tables."""
    return release_lsh_counts(family.histogram(X), family.n_tables, epsilon)


def release_grid(
    spec: GridSpec,
    X: ArrayLike,
    epsilon: Decimal | int | str,
    delta: Decimal | int | str,
    cell_limit: int,
) -> Release:
    """Noisy grid counts of ``X``: dense (epsilon-DP) up to ``cell_limit`` cells, else sparse
    and thresholded ((epsilon, delta)-DP); see :func:`release_grid_counts`."""
    if spec.n_cells <= cell_limit:
        return release_grid_counts(spec.dense_counts(X), spec.n_cells, epsilon, delta)
    return release_grid_counts(spec.occupied(X), spec.n_cells, epsilon, delta)
