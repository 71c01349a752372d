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
  Unknown Domain Algorithms in Differential Privacy", 2023): (epsilon, delta)-DP, the threshold
  chosen as the smallest one whose privacy map meets ``delta``.

The noise is drawn once; a :class:`Release` is immutable and is what a retry re-sends.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Literal

import numpy as np
import opendp.prelude as dp
from numpy.typing import ArrayLike, NDArray

from common.budget import PrivacyBudget

if TYPE_CHECKING:
    from common.grid import GridSpec
    from common.hashing import LSHFamily

__all__ = [
    "Release",
    "make_count_noise",
    "make_threshold_noise",
    "add_discrete_laplace",
    "release_lsh",
    "release_grid",
]

_SLACK = 1 + Decimal("1e-9")
_MAX_THRESHOLD = 2**40

dp.enable_features("contrib")


def make_count_noise(sensitivity: int, epsilon: Decimal | int | str) -> dp.Measurement:
    """Discrete Laplace over an integer vector with ``scale = sensitivity / epsilon``."""
    eps = Decimal(str(epsilon))
    if not eps > 0:
        raise ValueError(f"epsilon must be positive, got {epsilon}")
    if sensitivity < 1:
        raise ValueError(f"sensitivity must be >= 1, got {sensitivity}")
    scale = float(Decimal(sensitivity) / eps)
    meas = dp.m.make_laplace(
        dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int), scale=scale
    )
    spent = meas.map(sensitivity)  # type: ignore[no-untyped-call]
    if Decimal(str(spent)) > eps * (1 + Decimal("1e-9")):
        raise ValueError(f"mechanism spends {spent} > epsilon {eps}")
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
        Dense: ``values`` has ``n_cells`` entries. Sparse: ``values[i]`` belongs to cell
        ``indices[i]``, indices strictly increasing; absent cells were below the threshold.
    n_cells : int
    values : ndarray of int64, read-only
    indices : ndarray of int64, read-only, or None when dense
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
            indices = np.array(self.indices, dtype=np.int64)
            indices.setflags(write=False)
            if indices.shape != values.shape or (
                indices.size
                and (indices[0] < 0 or indices[-1] >= self.n_cells or np.any(np.diff(indices) <= 0))
            ):
                raise ValueError("sparse indices must match values and increase within n_cells")
            object.__setattr__(self, "indices", indices)


def _positive(epsilon: Decimal | int | str) -> PrivacyBudget:
    budget = PrivacyBudget(epsilon)
    if budget.epsilon <= 0:
        raise ValueError(f"epsilon must be positive, got {epsilon}")
    return budget


def make_threshold_noise(
    epsilon: Decimal | int | str, delta: Decimal | int | str
) -> tuple[dp.Measurement, int]:
    """Thresholded discrete Laplace over a sparse ``{cell: count}`` map, sensitivity 1.

    ``scale = 1 / epsilon``; the threshold is the smallest integer whose privacy map at
    ``(l0, l1, linf) = (1, 1, 1)`` (one record moves one cell by one) is within
    ``(epsilon, delta)``. Returns the measurement and its threshold.
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
    scale = float(1 / eps)
    domain = dp.map_domain(dp.atom_domain(T=int), dp.atom_domain(T=int))
    metric = dp.l01inf_distance(dp.absolute_distance(T=int))

    def build(threshold: int) -> tuple[dp.Measurement, bool]:
        meas = dp.m.make_laplace_threshold(domain, metric, scale=scale, threshold=threshold)
        spent_eps, spent_delta = meas.map((1, 1, 1))  # type: ignore[no-untyped-call]
        ok = Decimal(str(spent_delta)) <= dlt
        if Decimal(str(spent_eps)) > eps * _SLACK:
            raise ValueError(f"mechanism spends epsilon {spent_eps} > {eps}")
        return meas, ok

    hi = 1
    while not build(hi)[1]:
        hi *= 2
        if hi > _MAX_THRESHOLD:
            raise ValueError(f"no threshold meets delta {dlt} at epsilon {eps}")
    lo = hi // 2  # build(lo) fails, or lo == 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if build(mid)[1]:
            hi = mid
        else:
            lo = mid
    return build(hi)[0], hi


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
) -> Release:
    """Noisy release of exact grid counts (sensitivity 1).

    ``counts`` is either the dense vector of all ``n_cells`` cells (every cell, empty ones too,
    gets discrete Laplace noise of scale ``1 / epsilon``; ``delta`` must be 0) or a pair
    ``(cells, counts)`` of the occupied cells, released with the thresholded mechanism
    (:func:`make_threshold_noise`; ``delta`` > 0 and part of the cost).
    """
    cost = PrivacyBudget(epsilon, delta)
    _positive(epsilon)
    if not isinstance(counts, tuple):
        if cost.delta != 0:
            raise ValueError("a dense grid release is pure epsilon-DP; pass delta=0")
        exact = np.asarray(counts, dtype=np.int64)
        if exact.size != n_cells:
            raise ValueError(f"dense grid counts must have {n_cells} cells, got {exact.size}")
        return Release("grid", "dense", n_cells, add_discrete_laplace(exact, 1, cost.epsilon),
                       None, cost)
    meas, _ = make_threshold_noise(cost.epsilon, cost.delta)
    cells, values = (np.asarray(a, dtype=np.int64).tolist() for a in counts)
    released: dict[int, int] = meas(dict(zip(cells, values, strict=True)))
    indices = np.array(sorted(released), dtype=np.int64)
    out = np.array([released[int(i)] for i in indices], dtype=np.int64)
    return Release("grid", "sparse", n_cells, out, indices, cost)


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
