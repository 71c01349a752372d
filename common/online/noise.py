"""The memoised gradient noise of each learner family, as ``OnlineParams.noise()`` builds it.

DP-FTRL's prefix-sum releases (:func:`online_factor_noise`, the square-root factorisation of
:mod:`common.online.factor`; :func:`online_tree_noise`, tree aggregation of
:mod:`common.online.tree`) and FLMB's and the centring window's noisy batch sums
(:func:`online_noise`, :mod:`common.noise.gradient`). Each is cached by its public arguments
and its scale computed once, since the scale search calls OpenDP a few dozen times; OpenDP
itself is imported only when a noise is first built.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # OpenDP takes about a second to import: only where noise is needed
    from common.noise.gradient import GradientNoise

__all__ = ["online_factor_noise", "online_noise", "online_tree_noise"]

@functools.lru_cache(maxsize=16)
def online_tree_noise(clip: float, epsilon: float, delta: float, leaves: int) -> GradientNoise:
    """Memoised :func:`common.online.tree.tree_noise`."""
    from common.online.tree import tree_noise

    noise = tree_noise(clip, epsilon, delta, leaves)
    _ = noise.scale
    return noise


@functools.lru_cache(maxsize=16)
def online_factor_noise(clip: float, epsilon: float, delta: float, horizon: int
                        ) -> GradientNoise:
    """Memoised :func:`common.online.factor.factor_noise`."""
    from common.online.factor import factor_noise

    noise = factor_noise(clip, epsilon, delta, horizon)
    _ = noise.scale
    return noise


@functools.lru_cache(maxsize=16)
def online_noise(radius: float, epsilon: float, delta: float) -> GradientNoise:
    """Memoised :func:`make_gradient_noise` (its scale search calls OpenDP a few dozen times)."""
    from common.noise.gradient import make_gradient_noise

    noise = make_gradient_noise(radius, epsilon, delta)
    _ = noise.scale
    return noise
