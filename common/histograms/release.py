"""Differentially private release of integer count vectors, noise from OpenDP only.

Every function here draws its noise from the discrete Laplace mechanism of
:mod:`common.noise.laplace` (OpenDP, a cryptographically secure source; never numpy or
``random``).

- :func:`release_lsh`: all ``m`` LSH tables count every local record, so adding or removing
  one record changes one cell per table: L1 sensitivity ``m``. Every cell, empty or not, gets
  discrete Laplace noise of ``scale = m / epsilon``; pure epsilon-DP.
- :func:`release_grid`: one grid has sensitivity 1. Up to ``cell_limit`` cells it is released
  densely (noise on every cell, ``scale = 1 / epsilon``, pure epsilon-DP). Above, only occupied
  cells are noised and cells whose noisy count falls below a threshold are dropped
  (OpenDP ``make_laplace_threshold``; Rogers, "A Unifying Privacy Analysis Framework for
  Unknown Domain Algorithms in Differential Privacy", 2023): (epsilon, delta)-DP over an
  unknown domain of cell keys of any width (:mod:`common.histograms.cellkeys`); the threshold is
  calibrated in :func:`common.noise.laplace.make_threshold_noise`.

Scales are rounded up so that the true loss never exceeds the epsilon charged. Counts may
be all zero (an empty dataset releases noise only) and a sparse release of no cells is
valid. Nothing here depends on the data for success once the mechanism is built: keys come
from :class:`~common.histograms.grid.GridSpec`, which fits every cell the config allows.

The noise is drawn once; a :class:`Release` is immutable and is what a retry re-sends.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from common.budget import PrivacyBudget
from common.histograms.cellkeys import (
    as_keys,
    key_strings,
    key_words,
    keys_from_strings,
    keys_problem,
)
from common.histograms.grid import GridSpec
from common.histograms.hashing import LSHFamily
from common.noise.laplace import add_discrete_laplace, make_threshold_noise

__all__ = ["Release", "release_grid", "release_grid_counts", "release_lsh", "release_lsh_counts"]


@dataclass(frozen=True, eq=False)
class Release:
    """One noisy release, drawn once: the values are read-only and never re-noised.

    A retried upload re-sends this same object's encoding; drawing again would double the
    privacy cost.

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
        Cell keys, ``W = key_words(n_cells)`` 63-bit words each (:mod:`common.histograms.cellkeys`).
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


def release_lsh_counts(
    counts: ArrayLike, sensitivity: int, epsilon: Decimal | int | str
) -> Release:
    """Noisy release of an exact flat LSH histogram, ``scale = sensitivity / epsilon``.

    ``sensitivity`` is the L1 change one person can make: ``n_tables`` when a person has one
    row (one cell per table), ``n_tables * rows_per_id`` when a person may have several.
    ``counts`` must count every record once in each table (no fixed-size subsampling, which
    would break the sensitivity bound); every cell is noised (epsilon-DP). Exact counts may be
    accumulated chunk by chunk before this single noise draw.
    """
    cost = _positive(epsilon)
    exact = np.asarray(counts, dtype=np.int64)
    noisy = add_discrete_laplace(exact, sensitivity, cost.epsilon)
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
