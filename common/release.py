"""Differentially private release of integer count vectors, noise from OpenDP only.

Every function here draws its noise from OpenDP's discrete Laplace (two-sided geometric)
mechanism, which samples from a cryptographically secure source. Never numpy or ``random``.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import opendp.prelude as dp
from numpy.typing import NDArray

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
    spent = meas.map(sensitivity)
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
