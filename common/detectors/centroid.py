"""Centroid detector: a record's distance to the private cohort centres, weighted by their mass.

The model is a :class:`common.cohorts.model.CohortModel` (``k`` centres and their released,
noisy sizes in a public box), from the federated DP k-means of :mod:`common.cohorts.kmeans`
(:meth:`CentroidDetector.from_model`: no data needed) or, standalone, from the same private
k-means run on local data (:meth:`CentroidDetector.fit` with ``epsilon``).

Score (higher = more outlying)
------------------------------
Distances are taken in the study's unit box (``CohortModel.unit``), so every feature's
declared range counts alike. Read the model as a mixture of isotropic Gaussians of a common
bandwidth ``h`` centred on the cohorts, with weights from the released masses ``m_c``
(clamped at 0, add-one smoothed so a cohort of released size 0 keeps a finite weight):

    w_c = (m_c + 1) / (M + k),   M = sum_c m_c

and score a record by its negative log-density (constants dropped):

    s(x) = -log sum_c w_c exp(-||x - c||^2 / (2 h^2))
         ~= min_c [ ||x - c||^2 / (2 h^2) + log(1 / w_c) ]

The second line (the largest term, within ``log k`` of the first) shows the weighting: the
squared distance to a cohort plus a penalty ``log((M + k) / (m_c + 1))`` that is 0-ish for a
cohort holding most of the mass and about ``log M`` for an empty (noise) cohort. So a record
near a heavy cohort scores low; a record near a tiny cohort, or far from every cohort, scores
high. A plain nearest-centre distance would score a record sitting on a noise centroid as
perfectly normal; a distance divided by mass would score every record on a centre 0. This is
the Gaussian-mixture outlier score (e.g. Aggarwal, *Outlier Analysis*, 2nd ed., section 2.4)
with the mixture's parameters taken from the DP-KCCM release (Ni et al., Neurocomputing 2021).

The bandwidth ``h`` is public: by default (``bandwidth=None``) the per-axis standard deviation
of a uniform distribution on a cube of volume ``1 / k`` -- the cell each of ``k`` cohorts
would own if they tiled the unit box: ``h = k^(-1/d) / sqrt(12)``. It depends on ``k`` and
``d`` only, never on data.

Privacy
-------
Scoring is post-processing of the released model: it costs nothing. Standalone private
``fit`` spends ``epsilon`` (add/remove-one-record neighbours) through
:func:`common.cohorts.kmeans.release_round`: counts of L1 sensitivity 1, integer sums of L1
sensitivity ``KMeansPlan.sum_sensitivity``. Records are first mapped by the public bounds to
``[-1, 1]^d`` (a public affine map; it centres the box, so the sum sensitivity is ``d`` in
those units rather than ``sum_j max(|lo_j|, |hi_j|)``). The non-private mode
(``epsilon=None``) runs the same rounds on exact sums and counts; its model is local only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike, NDArray

from common.budget import PrivacyBudget
from common.cohorts.kmeans import (
    RoundRelease,
    fuse_centroids,
    initial_centroids,
    release_round,
    round_statistics,
    update_centroids,
)
from common.cohorts.model import CohortModel
from common.cohorts.plan import KMeansPlan, count_floor
from common.detectors.base import BaseDetector, NotFittedError, as_matrix
from common.detectors.lsh_itables import _seed_from

Floats = NDArray[np.float64]


def default_bandwidth(k: int, d: int) -> float:
    """``k^(-1/d) / sqrt(12)``: per-axis sd of a uniform cube of volume ``1/k`` (public)."""
    return float(k ** (-1.0 / d) / math.sqrt(12.0))


def mixture_scores(model: CohortModel, X: ArrayLike, bandwidth: float) -> Floats:
    """``s(x) = -log sum_c w_c exp(-||u(x) - u(c)||^2 / (2 h^2))`` (module docstring)."""
    x = model.unit(np.atleast_2d(np.asarray(X, dtype=np.float64)))
    c = model.unit(model.centroids)
    d2 = (x * x).sum(axis=1)[:, None] - 2.0 * x @ c.T + (c * c).sum(axis=1)[None, :]
    log_w = np.log((model.masses + 1.0) / (float(model.masses.sum()) + model.k))
    terms = log_w[None, :] - np.clip(d2, 0.0, None) / (2.0 * bandwidth**2)
    top = terms.max(axis=1)
    return np.asarray(-(top + np.log(np.exp(terms - top[:, None]).sum(axis=1))),
                      dtype=np.float64)


def private_cohorts(parts: Sequence[ArrayLike], lo: ArrayLike, hi: ArrayLike, k: int,
                    epsilon: Decimal | int | str | None, seed: bytes, *, over: int = 3,
                    rounds: int = 5) -> CohortModel:
    """DP k-means with pruning and fusion over ``parts`` (one array per participant; one for
    a standalone fit), in ``[-1, 1]^d`` by the public bounds; ``epsilon=None``: exact rounds.

    Each participant spends ``epsilon`` (:func:`common.cohorts.kmeans.release_round`).
    Returns the model in feature units with the fused, summed noisy masses.
    """
    lo_a, hi_a = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    d = lo_a.size
    box = -np.ones(d), np.ones(d)
    plan = KMeansPlan(lo=box[0], hi=box[1], k=k, over=over,
                      epsilon=1 if epsilon is None else epsilon,
                      rounds=rounds)
    scaled = [2.0 * (np.asarray(x, dtype=np.float64) - lo_a) / (hi_a - lo_a) - 1.0
              for x in parts]
    cents = initial_centroids(seed, plan.n_centroids, *box)
    counts = np.zeros(plan.n_centroids)
    for r in range(plan.rounds):
        stats = [round_statistics(x, cents, plan) for x in scaled]
        releases = ([release_round(s, plan, r) for s in stats] if epsilon is not None else
                    [RoundRelease(s.sums, s.counts, PrivacyBudget.zero()) for s in stats])
        floor = count_floor(plan, r, len(parts)) if epsilon is not None else 0.0
        cents, counts = update_centroids(releases, cents, plan, floor)
    floor = count_floor(plan, plan.rounds - 1, len(parts)) if epsilon is not None else 0.0
    fused, weights = fuse_centroids(cents, counts, plan.k, floor)
    return CohortModel((fused + 1.0) / 2.0 * (hi_a - lo_a) + lo_a, weights, lo_a, hi_a)


class CentroidDetector(BaseDetector):
    """Mass-weighted distance to private cohort centres (module docstring), PyOD contract.

    Parameters
    ----------
    n_clusters : int
        Cohorts ``k`` after fusion (standalone ``fit``).
    lo, hi : array-like of shape (d,), optional
        Public bounds. Required when ``epsilon`` is set; otherwise the training data's
        min/max are used (local only).
    epsilon : Decimal | int | str, optional
        Budget of the standalone private k-means (all rounds); ``None``: exact, non-private.
    over, rounds : int
        Fusion factor (start from ``over * k`` centroids) and Lloyd rounds.
    bandwidth : float, optional
        ``h`` in unit-box units; ``None``: :func:`default_bandwidth` (public).
    contamination : float
        Expected fraction of outliers, sets ``threshold_``.
    random_state : int, optional
        Seeds the seed-drawn initial centroids (the noise is OpenDP's, never seeded).

    Attributes
    ----------
    model_ : CohortModel
    bandwidth_ : float
    decision_scores_, threshold_, labels_ : as in PyOD
    """

    def __init__(
        self,
        n_clusters: int = 4,
        *,
        lo: ArrayLike | None = None,
        hi: ArrayLike | None = None,
        epsilon: Decimal | int | str | None = None,
        over: int = 3,
        rounds: int = 3,
        bandwidth: float | None = None,
        contamination: float = 0.1,
        random_state: int | None = None,
    ) -> None:
        super().__init__(contamination=contamination)
        self.n_clusters = n_clusters
        self.lo = lo
        self.hi = hi
        self.epsilon = epsilon
        self.over = over
        self.rounds = rounds
        self.bandwidth = bandwidth
        self.random_state = random_state

    def _bounds(self, X: Floats) -> tuple[Floats, Floats]:
        if self.lo is not None and self.hi is not None:
            return np.asarray(self.lo, dtype=np.float64), np.asarray(self.hi, dtype=np.float64)
        if self.epsilon is not None:
            raise ValueError("a private CentroidDetector needs public bounds lo and hi; bounds"
                             " taken from the data would leak")
        lo, hi = X.min(axis=0), X.max(axis=0)
        return lo, np.where(hi > lo, hi, lo + 1.0)  # a constant feature gets a unit range

    def fit(self, X: ArrayLike, y: Any = None) -> Self:
        """Run the (private) k-means on ``X`` and keep the cohort model; returns ``self``."""
        self._check_contamination()
        arr = as_matrix(X)
        lo, hi = self._bounds(arr)
        if lo.shape != (arr.shape[1],) or hi.shape != lo.shape:
            raise ValueError(f"lo and hi must have {arr.shape[1]} values each")
        model = private_cohorts([arr], lo, hi, self.n_clusters, self.epsilon,
                                _seed_from(self.random_state), over=self.over,
                                rounds=self.rounds)
        self._set_model(model)
        self._calibrate_later(arr)
        return self

    @classmethod
    def from_model(cls, model: CohortModel, *, X: ArrayLike | None = None,
                   bandwidth: float | None = None,
                   contamination: float = 0.1) -> CentroidDetector:
        """Detector over a released cohort model (federated: no data needed).

        When ``X`` (the caller's own records) is given, ``threshold_`` is set from them.
        """
        det = cls(n_clusters=model.k, lo=model.lo, hi=model.hi, bandwidth=bandwidth,
                  contamination=contamination)
        det._set_model(model)
        det.n_features_in_ = model.lo.shape[0]
        if X is not None:
            det.calibrate(X)
        return det

    def _set_model(self, model: CohortModel) -> None:
        self.model_ = model
        h = self.bandwidth
        self.bandwidth_ = (default_bandwidth(model.k, model.lo.shape[0]) if h is None
                           else float(h))
        if not self.bandwidth_ > 0:
            raise ValueError(f"bandwidth must be positive, got {h!r}")

    def decision_function(self, X: ArrayLike) -> Floats:
        """Mixture negative log-density of each row; higher = more outlying."""
        if not hasattr(self, "model_"):
            raise NotFittedError("CentroidDetector is not fitted: call fit or from_model")
        return mixture_scores(self.model_, self._check_input(X), self.bandwidth_)
