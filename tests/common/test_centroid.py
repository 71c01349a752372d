"""The centroid detector: the mass weighting, the standalone and federated models, privacy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from common.cohorts.kmeans import round_statistics
from common.cohorts.model import CohortModel
from common.cohorts.plan import KMeansPlan
from common.detectors import CentroidDetector
from common.detectors.centroid import default_bandwidth, mixture_scores, private_cohorts

LO, HI = np.zeros(2), np.full(2, 10.0)
MODEL = CohortModel(centroids=[[2.0, 2.0], [8.0, 8.0]], masses=[1000.0, -4.0], lo=LO, hi=HI)


def test_heavy_cohort_low_tiny_cohort_and_far_high():
    det = CentroidDetector.from_model(MODEL, bandwidth=0.1)
    heavy, tiny, far, mid = det.decision_function([[2, 2], [8, 8], [2, 8], [2.5, 2.5]])
    assert heavy < mid < tiny < far  # on a noise cohort's centre is not "normal"
    # the hard-minimum form of the docstring: within log k of the mixture score
    w = np.array([1001.0, 1.0]) / 1002.0
    for x, s in (([2, 2], heavy), ([8, 8], tiny), ([2, 8], far)):
        u = (np.array(x) - LO) / (HI - LO)
        c = (MODEL.centroids - LO) / (HI - LO)
        hard = min(((u - c) ** 2).sum(1) / (2 * 0.01) - np.log(w))
        assert hard - math.log(2) <= s <= hard + 1e-9


def test_default_bandwidth_is_public_and_documented():
    det = CentroidDetector.from_model(MODEL)
    assert det.bandwidth_ == default_bandwidth(2, 2) == pytest.approx(2**-0.5 / math.sqrt(12))
    assert det.n_features_in_ == 2
    scores = det.decision_function(np.array([[1.0, 1.0]]))
    np.testing.assert_allclose(scores, mixture_scores(MODEL, [[1.0, 1.0]], det.bandwidth_))
    with pytest.raises(ValueError, match="bandwidth"):
        CentroidDetector.from_model(MODEL, bandwidth=0.0)


def _blobs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)  # test data only
    X = np.vstack([rng.normal(3, 0.5, (n, 2)), rng.normal(7, 0.5, (n, 2)),
                   rng.uniform(0, 10, (n // 20, 2))])
    y = np.r_[np.zeros(2 * n), np.ones(n // 20)]
    return X, y


def test_standalone_private_and_federated_find_the_outliers():
    X, y = _blobs(3000, 0)
    private = CentroidDetector(2, lo=LO, hi=HI, epsilon=1, random_state=0).fit(X)
    assert roc_auc_score(y, private.decision_scores_) > 0.9
    parts = np.array_split(X, 5)
    model = private_cohorts(parts, LO, HI, 2, 1, b"study-seed")
    assert model.k == 2 and np.all(model.masses >= 0)
    assert sorted(np.round(model.centroids[:, 0]).tolist()) == [3.0, 7.0]
    federated = CentroidDetector.from_model(model, X=parts[0], contamination=0.05)
    assert roc_auc_score(y, federated.decision_function(X)) > 0.9
    assert federated.labels_.shape == (len(parts[0]),)


def test_non_private_is_deterministic_and_private_needs_public_bounds():
    X, _ = _blobs(200, 1)
    a = CentroidDetector(random_state=3).fit(X).decision_function(X)
    np.testing.assert_array_equal(a, CentroidDetector(random_state=3).fit(X).decision_function(X))
    with pytest.raises(ValueError, match="public bounds"):
        CentroidDetector(epsilon=1).fit(X)
    with pytest.raises(ValueError, match="epsilon"):  # 0 is not "no noise"
        CentroidDetector(lo=LO, hi=HI, epsilon=0).fit(X)


@pytest.mark.parametrize("seed", range(10))
def test_neighbours_change_the_released_statistics_by_the_stated_sensitivity(seed):
    """Standalone fit maps by the public bounds to [-1, 1]^d, then clips: a record anywhere
    (far outside the box too) moves one count by 1 and the integer sums by at most S."""
    rng = np.random.default_rng(seed)
    lo, hi = np.array([-5.0, 100.0, 0.0]), np.array([5.0, 300.0, 1.0])
    plan = KMeansPlan(lo=-np.ones(3), hi=np.ones(3), k=3, epsilon=1)
    X = rng.uniform(lo, hi, (50, 3))
    extra = rng.normal(0, 1e4, (1, 3))
    cents = rng.uniform(-1, 1, (plan.n_centroids, 3))
    scale = [2.0 * (x - lo) / (hi - lo) - 1.0 for x in (X, np.vstack([X, extra]))]
    a, b = (round_statistics(x, cents, plan) for x in scale)
    assert np.abs(b.counts - a.counts).sum() == 1
    assert np.abs(b.sums - a.sums).sum() <= plan.sum_sensitivity
    assert plan.sum_sensitivity == 3 * 2**plan.resolution_bits  # d in [-1, 1] units
