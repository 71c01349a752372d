"""Gaussian per-cluster sums of the federated DP k-means (``sum_noise="gaussian"``):
L2 sensitivity, a statistical test on neighbouring datasets for one round, exact ledgers."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pytest

from common.budget import PrivacyBudget
from common.cohorts import (
    KMeansPlan,
    RoundStatistics,
    fit_federated,
    release_round,
    round_statistics,
)
from common.cohorts.params import CohortParams
from common.cohorts.plan import split_delta
from common.cohorts.study import protocol_for
from common.noise.gaussian import add_gaussian, declared_delta, l2_scale

BOX = np.full(4, -1.0), np.full(4, 1.0)


def _plan(**kw: object) -> KMeansPlan:
    args: dict[str, object] = {"lo": BOX[0], "hi": BOX[1], "k": 2, "epsilon": "1",
                               "over": 1, "rounds": 1,
                               "resolution_bits": 2, "sum_noise": "gaussian",
                               "declared_n": 1000}
    args.update(kw)
    return KMeansPlan(**args)  # type: ignore[arg-type]


def test_l2_sensitivity_is_the_fixed_point_half_diagonal() -> None:
    # step 0.25 on [-1, 1]^4: a coordinate is at most 4 units, L2 sqrt(4 * 16) = 8, L1 16
    plan = _plan()
    assert (plan.step, plan.sum_l2_sensitivity, plan.sum_sensitivity) == (0.25, 8, 16)
    wide = _plan(lo=np.full(100, -1.0), hi=np.full(100, 1.0), resolution_bits=12)
    assert wide.sum_l2_sensitivity == 4096 * 10  # sqrt(d) in data units, d = 100
    odd = _plan(lo=np.array([-1.0, 0.0]), hi=np.array([1.0, 0.5]), resolution_bits=1)
    assert odd.sum_l2_sensitivity == 3  # units 2 and 1: sqrt(5) rounded up
    rng = np.random.default_rng(0)
    for _ in range(20):  # one record moves the sums by at most that, measured
        x, extra = rng.normal(size=(30, 4)) * 2.0, rng.normal(size=(1, 4)) * 3.0
        cents = np.array([[0.5, 0.5, 0.5, 0.5], [-0.5, -0.5, -0.5, -0.5]])
        a = round_statistics(x, cents, plan).sums
        b = round_statistics(np.vstack([x, extra]), cents, plan).sums
        assert math.sqrt(float(((b - a) ** 2).sum())) <= plan.sum_l2_sensitivity


def _tail_log_ratio(noisy_a: np.ndarray, noisy_b: np.ndarray, a: np.ndarray, b: np.ndarray,
                    sd: float) -> float:
    """log P[E | D'] - log P[E | D] for E = {projection of the released sums' noise on the
    direction D' moves them >= sd} (rows: independent releases of ``a`` and ``b``): for
    Gaussian noise the most revealing direction."""
    u = (b - a).ravel() / np.linalg.norm(b - a)
    proj_a, proj_b = ((noisy - a.ravel()) @ u for noisy in (noisy_a, noisy_b))
    return math.log(np.mean(proj_b >= sd)) - math.log(np.mean(proj_a >= sd))


def test_one_gaussian_round_on_neighbours_stays_within_epsilon_and_a_wrong_scale_is_caught(
) -> None:
    """D' = D + the corner record (1, 1, 1, 1): its cluster's sums move by the full L2
    sensitivity 8. Through :func:`release_round` (scale s ~ 37 for eps_sums 0.8) the exact
    log-ratio of the event is ~0.31, under 0.8; sums calibrated at L2 sensitivity 1
    (scale ~ 4.6) give ~1.57 and are caught. Each statistic is tiled ``n`` times in one
    release (the same mechanism entry-wise: ``n`` independent releases); 4000 draws give a
    standard error of ~0.05."""
    plan, n = _plan(), 4000
    eps_sums, delta = plan.budgets()[0][1], plan.deltas()[0]
    assert eps_sums == Decimal("0.8") and delta == declared_delta(1000)
    cents = np.array([[0.5, 0.5, 0.5, 0.5], [-0.5, -0.5, -0.5, -0.5]])
    x = np.random.default_rng(1).uniform(-1, 1, size=(40, 4))
    a = round_statistics(x, cents, plan)
    b = round_statistics(np.vstack([x, np.ones((1, 4))]), cents, plan)
    assert int(((b.sums - a.sums) ** 2).sum()) == 64

    def released(s: RoundStatistics) -> np.ndarray:
        tiled = RoundStatistics(np.tile(s.sums, (n, 1)), np.tile(s.counts, n))
        return release_round(tiled, plan, 0).sums.reshape(n, -1)

    right = _tail_log_ratio(released(a), released(b), a.sums, b.sums,
                            l2_scale(8, eps_sums, delta))
    assert right < 0.55 < float(eps_sums), right
    wrong = _tail_log_ratio(*(add_gaussian(np.tile(s.sums.ravel(), (n, 1)), 1, eps_sums, delta)
                              for s in (a, b)), a.sums, b.sums, l2_scale(1, eps_sums, delta))
    assert wrong > 1.1, wrong


@pytest.mark.parametrize("schedule", ["even", "adaptive"])
@pytest.mark.parametrize(("rounds", "n"), [(5, 100_000), (7, 1000), (12, 2)])
def test_ledgers_carry_the_total_delta_split_over_the_rounds(schedule: str, rounds: int,
                                                            n: int) -> None:
    plan = _plan(epsilon="1.3", rounds=rounds, schedule=schedule, declared_n=n)
    costs = plan.costs()
    total = sum(costs, PrivacyBudget.zero())
    assert total == PrivacyBudget("1.3", declared_delta(n)) == plan.total_cost()
    assert all(0 < c.delta < declared_delta(n) for c in costs)  # each round a share, not all
    assert max(c.delta for c in costs) - min(c.delta for c in costs) <= Decimal("1e-18")
    assert [c.epsilon for c in costs] == [e + s for e, s in plan.budgets()]


def test_fit_and_protocol_charge_what_the_plan_states() -> None:
    plan = _plan(rounds=3, schedule="adaptive", declared_n=500)
    rng = np.random.default_rng(2)
    _, _, spent = fit_federated([rng.uniform(-1, 1, (60, 4)) for _ in range(2)], plan, b"g")
    assert spent == PrivacyBudget("1", declared_delta(500))
    params = CohortParams(method="kmeans", epsilon=Decimal(1), k=2, over=1, rounds=3,
                          schedule="adaptive", resolution_bits=2, sum_noise="gaussian",
                          declared_n=500)
    proto = protocol_for(params, [-1.0] * 4, [1.0] * 4, b"g")
    assert proto.cost(proto.start()) == plan.costs()[0]
    assert params.cap() == PrivacyBudget("1", declared_delta(500))


def test_config_requires_declared_n_exactly_with_gaussian_sums() -> None:
    with pytest.raises(ValueError, match="declared_n"):
        CohortParams(method="kmeans", epsilon=Decimal(1), k=2, sum_noise="gaussian")
    with pytest.raises(ValueError, match="declared_n"):
        CohortParams(method="kmeans", epsilon=Decimal(1), k=2, declared_n=1000)
    with pytest.raises(ValueError, match="sum_noise"):
        CohortParams(method="dpm", epsilon=Decimal(1), sum_noise="gaussian", declared_n=1000)
    with pytest.raises(ValueError):
        _plan(declared_n=None)
    with pytest.raises(ValueError, match="delta"):
        split_delta(10**12, 2)  # delta is one 1e-18 unit: it cannot be split
    laplace = CohortParams(method="kmeans", epsilon=Decimal(1), k=2)
    assert "sum_noise" not in laplace.model_dump(mode="json")  # old signatures still verify
    assert laplace.cap() == PrivacyBudget(1)
