"""The combined score: weighted rank percentiles, with weights from public inputs only."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pytest

from common.cohorts.params import CohortParams
from common.cohorts.plan import split_delta, split_epsilon
from common.detectors.centroid import default_bandwidth
from common.detectors.combine import (
    DetectorPlan,
    centroid_plan,
    combine,
    public_weights,
    study_weights,
)
from common.noise.gaussian import histogram_scale
from common.noise.planning import score_snr
from common.secagg.params import AggregationParams
from common.study.config import FeatureSpec, GridParams, PrivacyParams, new_study_config

A, B = np.array([1.0, 3.0, 2.0, 4.0]), np.array([40.0, 10.0, 20.0, 30.0])


def test_equal_weights_are_the_mean_of_ranks():
    combined, rank = combine({"a": A, "b": B})
    np.testing.assert_allclose(combined, [(0.25 + 1) / 2, (0.75 + 0.25) / 2, (0.5 + 0.5) / 2,
                                          (1 + 0.75) / 2])
    assert rank.tolist() == [2, 3, 4, 1]  # ties: the earlier record ranks first
    np.testing.assert_allclose(combine({"a": A, "b": B}, {"a": 2, "b": 2})[0], combined)


def test_weights_are_normalised_and_zero_drops_a_detector():
    combined, rank = combine({"a": A, "b": B}, {"a": 3.0, "b": 0.0})
    np.testing.assert_allclose(combined, [0.25, 0.75, 0.5, 1.0])
    assert rank.tolist() == [4, 2, 3, 1]
    mixed, _ = combine({"a": A, "b": B}, {"a": 0.75})  # absent: weight 0
    np.testing.assert_allclose(mixed, combined)
    np.testing.assert_allclose(combine({"a": A, "b": B}, {"a": 1, "b": 3})[0],
                               0.25 * combined + 0.75 * np.array([1.0, 0.25, 0.5, 0.75]))


@pytest.mark.parametrize("weights", [{"a": -1, "b": 2}, {"a": 0, "b": 0}, {"a": math.nan}])
def test_bad_weights_are_refused(weights):
    with pytest.raises(ValueError, match="weights"):
        combine({"a": A, "b": B}, weights)


def test_plans_follow_the_stated_formulas():
    lsh = DetectorPlan.lsh("1", 10, 500, 100, 16)
    assert lsh.snr == score_snr("1", "independent", 10, 500, 100, 16)
    assert DetectorPlan.lsh("1", 10, 500, 100, 16, "secure", 10).snr > lsh.snr  # one draw
    assert DetectorPlan.grid(2, 8, 1000, 4096, sparse=False).snr == pytest.approx(
        8000 / 4096 * 2 / 4)
    assert DetectorPlan.grid(1, 8, 1000, 10, sparse=True, delta="1e-6").snr == pytest.approx(
        100 / math.log(1e6))
    h = default_bandwidth(4, 9)
    error = math.sqrt(20) * 9 / (2 * (0.8 / 3) * (10 * 700 / 4))
    assert DetectorPlan.centroid(1, 10, 700, 4, 9).snr == pytest.approx(h / error)
    for low, high in ((DetectorPlan.lsh("0.1", 10, 500, 100, 16), lsh),
                      (DetectorPlan.centroid(1, 10, 70, 4, 9),
                       DetectorPlan.centroid(1, 10, 7000, 4, 9))):
        assert 0 <= low.reliability < high.reliability < 1


def test_noise_dominated_detector_all_but_drops_out():
    w = public_weights({"lsh": DetectorPlan(10.0), "grid": DetectorPlan(0.01),
                        "centroid": DetectorPlan(1.0)})
    assert sum(w.values()) == pytest.approx(1.0)
    assert w["grid"] < 1e-3 < w["centroid"] < w["lsh"]
    assert w["lsh"] / w["centroid"] == pytest.approx((100 / 101) / 0.5)
    assert public_weights({"a": DetectorPlan(0.0), "b": DetectorPlan(0.0)}) == {"a": 0.5,
                                                                                "b": 0.5}


FEATURES = [FeatureSpec(name=f"x{i}", lo=0.0, hi=1.0) for i in range(6)]
PRIVACY = PrivacyParams(epsilon_lsh=Decimal(1), epsilon_grid=Decimal(1))


def test_study_weights_read_the_signed_config_only():
    declared = AggregationParams(cohort_size=10, expected_records=400)
    config = new_study_config("s1", FEATURES, privacy=PRIVACY, grid=GridParams(),
                              aggregation=declared)
    w = study_weights(config, ["lsh", "grid"])
    assert w is not None and sum(w.values()) == pytest.approx(1.0)
    lsh = DetectorPlan.lsh(1, 10, 400, 100, 16).reliability
    grid = DetectorPlan.grid(1, 10, 400, 4**6, sparse=False).reliability
    assert w["lsh"] == pytest.approx(lsh / (lsh + grid)) and w["grid"] < 0.05
    centroid = DetectorPlan.centroid(1, 10, 400, 4, 6)
    with_centroid = study_weights(config, ["lsh", "grid", "centroid"], centroid)
    assert with_centroid is not None and set(with_centroid) == {"lsh", "grid", "centroid"}
    assert study_weights(config, ["lsh", "centroid"]) is None  # no plan: nothing to judge
    undeclared = new_study_config("s1", FEATURES, privacy=PRIVACY, grid=GridParams())
    assert study_weights(undeclared, ["lsh", "grid"]) is None  # equal weights


def test_precision_rule_leans_on_the_least_noisy_detector():
    plans = {"lsh": DetectorPlan(9.0), "centroid": DetectorPlan(4.0)}
    rel, prec = public_weights(plans), public_weights(plans, "precision")
    assert prec["lsh"] / prec["centroid"] == pytest.approx(9 * math.sqrt(82) / (4 * math.sqrt(17)))
    assert prec["lsh"] > rel["lsh"] > 0.5
    with pytest.raises(ValueError, match="rule"):
        public_weights(plans, "best")  # type: ignore[arg-type]


def _cohort_config(**cohorts: object):
    params = CohortParams(method="kmeans", epsilon=Decimal(1), k=4, rounds=5, **cohorts)
    return new_study_config("s1", FEATURES, privacy=PRIVACY, grid=GridParams(), cohorts=params,
                            aggregation=AggregationParams(cohort_size=10, expected_records=400))


def test_centroid_plan_reads_the_last_rounds_budget_of_the_schedule():
    # adaptive at T = 5 gives the last round 3/9 of epsilon, even 1/5: 5/3 the SNR
    even, adaptive = (centroid_plan(_cohort_config(schedule=s)) for s in ("even", "adaptive"))
    assert even is not None and adaptive is not None
    assert adaptive.snr / even.snr == pytest.approx(5 / 3, rel=1e-6)
    last = split_epsilon(Decimal(1), 5, "0.2", "adaptive")[-1][1]
    error = math.sqrt(20) * 6 / (2 * float(last) * (10 * 400 / 4))
    assert adaptive.snr == pytest.approx(default_bandwidth(4, 6) / error)


def test_centroid_plan_of_gaussian_sums_uses_the_gaussian_scale():
    plan = centroid_plan(_cohort_config(schedule="adaptive", sum_noise="gaussian",
                                        declared_n=4000))
    eps_sums = split_epsilon(Decimal(1), 5, "0.2", "adaptive")[-1][1]
    sd = histogram_scale(6, eps_sums, split_delta(4000, 5)[-1])
    assert plan is not None
    assert plan.snr == pytest.approx(default_bandwidth(4, 6) / (math.sqrt(10) * sd
                                                                / (2 * 10 * 400 / 4)))
    # in 100 dimensions the L2 calibration beats the L1 one
    assert (DetectorPlan.centroid(1, 10, 400, 4, 100, rounds=5, declared_n=4000).snr
            > 2 * DetectorPlan.centroid(1, 10, 400, 4, 100, rounds=5).snr)
