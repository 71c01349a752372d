"""Statistical yardsticks of the online-learning privacy tests: the significance level of the
frequency tests and an empirical hockey-stick divergence."""

from __future__ import annotations

import math

import numpy as np

ALPHA = 1e-4
"""Significance of the frequency tests: a correct sampler fails once in 10 000 runs."""


def hockey_stick(a: np.ndarray, b: np.ndarray, epsilon: float) -> float:
    """Empirical delta(epsilon) of two samples on shared bins (binning is post-processing)."""
    edges = np.linspace(min(a.min(), b.min()), max(a.max(), b.max()), 41)
    pa = np.histogram(a, edges)[0] / a.size
    pb = np.histogram(b, edges)[0] / b.size
    return float(
        max(
            np.maximum(pa - math.exp(epsilon) * pb, 0).sum(),
            np.maximum(pb - math.exp(epsilon) * pa, 0).sum(),
        )
    )
