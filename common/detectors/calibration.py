"""PyOD's post-processing of outlier scores, as pure functions of the training scores.

Everything PyOD's ``BaseDetector`` derives from ``decision_scores_`` (the training scores,
higher = more outlying): the contamination threshold, the two probability conversions of
``predict_proba``, the confidence of Perini et al. (``predict_confidence``), the rank of
``_predict_rank`` and the rejection statistics of ``compute_rejection_stats``. The formulas
are PyOD's (``pyod/models/base.py``), vectorised; tests/common/test_detector_api.py checks
them against PyOD's own methods. Two deliberate differences, both where PyOD divides by zero:
constant training scores give ``unify`` probabilities 0/1 (PyOD: NaN) and a normalised rank
of all zeros (PyOD: NaN).

SciPy is imported inside the functions that need it, so importing the detectors stays cheap.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

Scores = NDArray[np.float64]


class Calibrated(NamedTuple):
    """What ``fit`` fixes from the training scores (PyOD's ``_process_decision_scores``)."""

    scores: Scores
    contamination: float
    threshold: float
    labels: NDArray[np.int64]
    mu: float
    sigma: float


def calibrate_scores(scores: Scores, contamination: float) -> Calibrated:
    """Threshold at the ``1 - contamination`` percentile; labels are the scores above it."""
    threshold = float(np.percentile(scores, 100.0 * (1.0 - contamination)))
    labels = (scores > threshold).astype(np.int64)
    return Calibrated(scores, contamination, threshold, labels, float(np.mean(scores)),
                      float(np.std(scores)))


def _two_columns(p_outlier: Scores) -> Scores:
    return np.column_stack([1.0 - p_outlier, p_outlier])


def linear_proba(cal: Calibrated, test: Scores) -> Scores:
    """``[P(inlier), P(outlier)]`` by min-max scaling on the training scores, clipped to [0, 1]."""
    lo, hi = float(cal.scores.min()), float(cal.scores.max())
    span = hi - lo
    if span < 10 * np.finfo(np.float64).eps:  # MinMaxScaler's handling of a constant column
        span = 1.0
    return _two_columns(np.clip((test - lo) / span, 0.0, 1.0))


def unify_proba(cal: Calibrated, test: Scores) -> Scores:
    """``[P(inlier), P(outlier)]`` by Gaussian scaling (Kriegel et al. 2011, "unify")."""
    from scipy.special import erf

    with np.errstate(divide="ignore", invalid="ignore"):
        z = (test - cal.mu) / (cal.sigma * math.sqrt(2.0))
    z = np.where(np.isnan(z), 0.0, z)  # constant training scores: test == mu
    return _two_columns(np.clip(erf(z), 0.0, 1.0))


def confidence(cal: Calibrated, test: Scores) -> Scores:
    """Probability that the label of each test score survives a perturbed training set.

    Perini et al. (2020), as in PyOD: the Bayesian outlier probability of the score's rank
    among the training scores, through the binomial tail at the contamination cut.
    """
    from scipy.stats import binom

    n = cal.scores.shape[0]
    below = np.searchsorted(np.sort(cal.scores), test, side="right")
    posterior = (1.0 + below) / (2.0 + n)
    conf = np.asarray(1.0 - binom.cdf(n - int(n * cal.contamination), n, posterior),
                      dtype=np.float64)
    inlier = test <= cal.threshold
    conf[inlier] = 1.0 - conf[inlier]
    return conf


def rank(cal: Calibrated, test: Scores, normalized: bool = False) -> NDArray[np.float64]:
    """Number of training scores below each test score (PyOD's ``_predict_rank``)."""
    ranks = np.searchsorted(np.sort(cal.scores), test).astype(np.float64)
    if normalized:
        top = ranks.max()
        return ranks / top if top > 0 else ranks
    return ranks


def rejection_stats(
    cal: Calibrated, T: float, delta: float, c_fp: float, c_fn: float, c_r: float
) -> tuple[float, float, float]:
    """PyOD's ``compute_rejection_stats``: expected rejection rate, its upper bound (holds
    with probability ``1 - delta``) and the upper bound of the cost (Perini et al., 2023).

    ``c_r < 0`` means "the contamination"; ``delta`` outside (0, 1) means 0.1, as in PyOD.
    """
    from scipy.optimize import root_scalar
    from scipy.stats import binom

    gamma = cal.contamination
    c_r = gamma if c_r < 0 else c_r
    delta = 0.1 if not 0.0 < delta < 1.0 else delta
    n = cal.scores.shape[0]
    k = int(n * gamma) - 1

    def root(level: float) -> float:
        return float(root_scalar(lambda p: binom.cdf(k, n, p) - level, bracket=[0, 1],
                                 method="brentq").root)

    q1, q2 = root(1 - math.exp(-T)), root(math.exp(-T))
    expected = q2 - q1
    right = min(1.0, (-gamma * (n + 2) + n + 1) / n + (T * (n + 2)) / math.sqrt(2 * n**3 * T))
    inner = 0.5 * n**5 * (2 * n * (-3 * gamma**2 - 2 * n * (1 - gamma) ** 2 + 4 * gamma - 3)
                          + T * (n + 2) ** 2 - 8)
    # PyOD: max(0, nan) is 0 when the square root's argument is negative
    left = 0.0 if inner < 0 else max(0.0, (2 + n * (1 - gamma) * (n + 1)) / n**2
                                     - math.sqrt(inner) / n**4)
    upper_rate = right - left + 2 * math.sqrt(math.log(2 / delta) / (2 * n))
    upper_cost = min(gamma, q1) * c_fp + min(1 - q2, gamma) * c_fn + (q2 - q1) * c_r
    return expected, upper_rate, upper_cost
