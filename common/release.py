"""Differentially private release of integer count vectors, noise from OpenDP only.

Every function here draws its noise from OpenDP's discrete Laplace (two-sided geometric)
mechanism, which samples from a cryptographically secure source. Never numpy or ``random``.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

import numpy as np
import opendp.prelude as dp
from numpy.typing import NDArray

from common.budget import PrivacyBudget

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
