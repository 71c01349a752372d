"""Noisy mini-batch gradient sums: OpenDP's Gaussian mechanism, accounted as (epsilon, delta).

Sensitivity. Records are projected into the l2 ball of radius ``M``. The hinge-loss gradient of
one record is ``-y x`` or ``0``, so its l2 norm is at most ``M``. The unit of privacy is the
system's (DESIGN.md): adding or removing one record. In a stream a removed record leaves an
*empty slot* (the empty record, gradient 0: docs/ONLINE.md "Neighbouring streams"), so two
neighbouring batches differ in one slot that holds a record in one and the empty record in the
other, and the batch sum moves by at most ``M`` (Kairouz et al., ICML 2021, call this
"zero-out"). Replacing one record by another is two such steps: at most ``2 M``, i.e. four times
the zCDP ``rho`` below (the seed paper's replace-one relation, covered at that price, not
charged). The regulariser ``lambda * w`` does not depend on the batch and is added after the
noise.

Mechanism. The paper adds l2-Laplace noise (density ``exp(-epsilon ||z|| / (2 M))``). OpenDP
has no exact sampler for that, so this module uses OpenDP's Gaussian mechanism over a float
vector with l2 sensitivity ``M`` (an exact sampler from a CSPRNG). It is ``rho``-zCDP with
``rho = M**2 / (2 scale**2)``; OpenDP's zCDP -> approximate-DP conversion gives the
``(epsilon, delta)`` that is charged. :func:`gaussian_scale` picks the smallest scale (to a
relative 1e-6) whose converted epsilon at ``delta`` is within the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import opendp.prelude as dp
from numpy.typing import NDArray

__all__ = ["GradientNoise", "gaussian_scale", "make_gradient_noise"]

dp.enable_features("contrib")

_FLOAT_SLACK = 1 + 1e-9
"""Projection and summation in floats can overshoot ``M`` by a few ulps; charge for it."""


def _make_gaussian(dim: int, scale: float) -> dp.Measurement:
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=dim)
    return dp.m.make_gaussian(domain, dp.l2_distance(T=float), scale=scale)


def _epsilon_at(sensitivity: float, scale: float, delta: float) -> float:
    meas = dp.c.make_zCDP_to_approxDP(_make_gaussian(1, scale))
    profile = meas.map(sensitivity)  # type: ignore[no-untyped-call]
    return float(profile.epsilon(delta))


def gaussian_scale(sensitivity: float, epsilon: float, delta: float) -> float:
    """Smallest Gaussian scale whose OpenDP-accounted epsilon at ``delta`` is <= ``epsilon``."""
    if not sensitivity > 0:
        raise ValueError(f"sensitivity must be > 0, got {sensitivity}")
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    low, high = 1e-6 * sensitivity, sensitivity
    while _epsilon_at(sensitivity, high, delta) > epsilon:
        low, high = high, high * 2
    while high - low > 1e-6 * high:
        mid = (low + high) / 2
        low, high = (mid, high) if _epsilon_at(sensitivity, mid, delta) > epsilon else (low, mid)
    return high


@dataclass(frozen=True)
class GradientNoise:
    """Gaussian noise for a mini-batch gradient sum: ``scale`` is fixed by the other fields."""

    sensitivity: float
    epsilon: float
    delta: float

    @cached_property
    def scale(self) -> float:
        """Noise standard deviation, from :func:`gaussian_scale`."""
        return gaussian_scale(self.sensitivity, self.epsilon, self.delta)

    def accounted_epsilon(self) -> float:
        """Epsilon at ``delta`` that OpenDP's privacy map gives for ``scale`` (<= epsilon)."""
        return _epsilon_at(self.sensitivity, self.scale, self.delta)

    def release(self, gradient_sum: NDArray[np.float64]) -> NDArray[np.float64]:
        """``gradient_sum`` plus one fresh Gaussian draw; call once per batch, keep the result."""
        vec = np.asarray(gradient_sum, dtype=np.float64).ravel()
        if not np.all(np.isfinite(vec)):
            raise ValueError("gradient sum must be finite")
        meas = _make_gaussian(vec.size, self.scale)
        return np.asarray(meas([float(v) for v in vec]), dtype=np.float64)


def make_gradient_noise(radius: float, epsilon: float, delta: float) -> GradientNoise:
    """Noise for gradient sums of records in the l2 ball of ``radius``: sensitivity ``radius``
    (one slot's record against the empty record).

    The sensitivity is inflated by a relative 1e-9 so that float rounding in the projection
    and the sum cannot push two neighbouring sums further apart than the noise is set for.
    """
    if not radius > 0:
        raise ValueError(f"radius must be > 0, got {radius}")
    return GradientNoise(sensitivity=radius * _FLOAT_SLACK, epsilon=epsilon, delta=delta)
