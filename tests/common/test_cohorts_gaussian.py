"""Gaussian leaf histograms of the DPM tree (common.noise.gaussian).

One record moves a leaf release's histograms by 1 on one interval of each of the ``d``
features: L2 sensitivity ``sqrt(d)``. The discrete Gaussian (OpenDP) is charged as
``(epsilon, delta)`` with ``delta = 1 / (n sqrt n)`` for a declared n, on both ledgers.
"""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pytest

from common.budget import PrivacyBudget
from common.cohorts import DPMPlan, leaf_statistics, release_leaves, tree_state
from common.cohorts.params import CohortParams
from common.cohorts.study import protocol_for
from common.noise.gaussian import (
    add_discrete_gaussian,
    declared_delta,
    gaussian_epsilon,
    histogram_scale,
    l2_sensitivity,
)
from common.noise.scale import discrete_laplace_sd
from common.study.config import canonical_json

D = 16
LO, HI = np.full(D, -10.0), np.full(D, 10.0)
DELTA = Decimal("0.00001")


def _plan(**kw: object) -> DPMPlan:
    args: dict[str, object] = {"lo": LO, "hi": HI, "epsilon": "1", "depth": 2, "bins": 8,
                               "leaf_noise": "gaussian", "declared_n": 1000}
    args.update(kw)
    return DPMPlan(**args)  # type: ignore[arg-type]


def test_declared_delta_is_one_over_n_sqrt_n_rounded_down() -> None:
    assert declared_delta(100_000) == Decimal("0.000000031622776601")  # 3.16227766016838e-8
    assert declared_delta(10_000) == Decimal("0.000001")
    for bad in (1, 0, True, 2.5):
        with pytest.raises(ValueError):
            declared_delta(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("d", "l2"), [(1, 1), (4, 2), (5, 3), (10, 4), (16, 4), (100, 10)])
def test_the_map_is_evaluated_at_ceil_sqrt_d(d: int, l2: int) -> None:
    assert l2_sensitivity(d) == l2 and l2 * l2 >= d > (l2 - 1) ** 2


@pytest.mark.parametrize("seed", range(8))
def test_neighbouring_leaf_histograms_differ_by_sqrt_d_in_l2(seed: int) -> None:
    plan = _plan()
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(200, D)) * 3.0
    extra = rng.normal(size=(1, D)) * 30.0  # often outside the box: clipped
    state = tree_state(plan, b"s").close()
    a, b = leaf_statistics(x, state, plan), leaf_statistics(np.vstack([x, extra]), state, plan)
    diff = b.histograms - a.histograms
    assert set(np.unique(diff)) <= {0, 1} and int((diff * diff).sum()) == D  # L2 = sqrt(d)


def test_scale_is_the_smallest_within_the_budget() -> None:
    scale = histogram_scale(D, Decimal("1"), DELTA)
    assert gaussian_epsilon(D, scale, DELTA) <= 1.0
    assert gaussian_epsilon(D, scale * 0.999, DELTA) > 1.0
    # the Laplace alternative pays L1 = d: its standard deviation is larger even at d = 16
    # and epsilon 1 (22.6 vs 16.2); at d = 100 and epsilon 0.32 it is 442 vs 154
    assert scale < discrete_laplace_sd(D / 1.0)


def _event_log_ratio(plus: np.ndarray, base: np.ndarray, shift: int, sd: float) -> float:
    """log P[sum of the touched intervals' noise >= 1.5 sd | D+] - log P[same | D]: the sum
    along the shift is the most revealing direction for Gaussian noise."""
    t = 1.5 * sd
    p_plus = np.mean(plus.sum(axis=1) >= t)
    p = np.mean(base.sum(axis=1) >= t)
    return math.log(p_plus) - math.log(p)


def test_leaf_release_on_neighbours_stays_within_epsilon_and_a_wrong_scale_is_caught() -> None:
    """Neighbouring datasets' leaf releases, restricted to the D intervals the extra record
    touches (their sum moves by D = 16; the sum's noise has sd 4 s). With the right scale
    s ~ 16.2 (L2 sensitivity 4) the Gaussian log-ratio of the event is
    log(Q(1.5 - 16 / (4 s)) / Q(1.5)) ~ 0.45, under epsilon 1 (delta absorbs the far tail); a
    release calibrated at sensitivity 1 (s ~ 4.0) gives ~ 1.52 and is caught. 3000 draws:
    standard errors ~ 0.1 and ~ 0.07 (8 repeats gave means 0.43 and 1.56, sd 0.11 and
    0.07), both margins over 4 of them. (The event was at 2 sd
    before: the ratio there is ~ 0.56 with a standard error ~ 0.15, 2.3 of them under the 0.9
    margin: about one run in 100 fails, and one did during this change.)"""
    eps = Decimal("1")
    x = np.random.default_rng(3).normal(size=(300, D)) * 3.0
    plan = _plan()
    state = tree_state(plan, b"s").close()
    a = leaf_statistics(x, state, plan).histograms
    b = leaf_statistics(np.vstack([x, np.full((1, D), 1.0)]), state, plan).histograms
    where = np.flatnonzero(b != a)
    assert where.size == D
    draws = 3000

    def sample(scale_d: int, s: np.ndarray) -> np.ndarray:
        noisy = add_discrete_gaussian(np.tile(s[where], draws), scale_d, eps, DELTA)
        return noisy.reshape(draws, D) - a[where]

    for scale_d, inside in ((D, True), (1, False)):
        sd = histogram_scale(scale_d, eps, DELTA) * math.sqrt(D)
        ratio = _event_log_ratio(sample(scale_d, b), sample(scale_d, a), D, sd)
        assert (ratio <= float(eps)) == inside, (scale_d, ratio)
        assert (ratio < 0.9) if inside else (ratio > 1.1), (scale_d, ratio)


def test_released_noise_has_the_calibrated_spread() -> None:
    scale = histogram_scale(D, Decimal("1"), DELTA)
    noise = add_discrete_gaussian(np.zeros(8000, dtype=np.int64), D, Decimal("1"), DELTA)
    assert abs(noise.mean()) < 4 * scale / math.sqrt(8000)
    assert abs(noise.std() / scale - 1) < 0.05


def test_budget_and_both_ledgers_carry_the_delta() -> None:
    plan = _plan(epsilon="1.3", depth=3)
    budget = plan.budgets()
    assert budget.total == Decimal("1.3") and budget.leaf_delta == declared_delta(1000)
    costs = plan.round_costs()
    assert all(c.delta == 0 for c in costs[:-1])
    assert costs[-1] == PrivacyBudget(budget.leaf_counts + budget.leaf_histograms,
                                      declared_delta(1000))
    assert sum(costs, PrivacyBudget.zero()) == PrivacyBudget("1.3", declared_delta(1000))
    assert _plan(leaf_noise="laplace", declared_n=None).round_costs()[-1].delta == 0
    stats = leaf_statistics(np.zeros((5, D)), tree_state(plan, b"s").close(), plan)
    assert release_leaves(stats, plan).histograms.shape == stats.histograms.shape


def test_gaussian_needs_a_declared_n_and_only_dpm_takes_it() -> None:
    with pytest.raises(ValueError, match="declared_n"):
        _plan(declared_n=None)
    with pytest.raises(ValueError, match="declared_n"):
        _plan(leaf_noise="laplace")
    with pytest.raises(ValueError):
        CohortParams(method="dpm", epsilon="1", leaf_noise="gaussian")
    with pytest.raises(ValueError, match="declared_n"):  # k-means: only with gaussian sums
        CohortParams(k=2, epsilon="1", declared_n=1000)
    with pytest.raises(ValueError, match="dpm only"):
        CohortParams(k=2, epsilon="1", leaf_noise="gaussian", declared_n=1000)


def test_params_sign_the_noise_and_the_protocol_charges_the_delta() -> None:
    laplace = CohortParams(method="dpm", epsilon="1", depth=2, bins=8)
    assert b"leaf_noise" not in canonical_json(laplace)
    assert b"declared_n" not in canonical_json(laplace)
    gauss = CohortParams(method="dpm", epsilon="1", depth=2, bins=8, leaf_noise="gaussian",
                         declared_n=1000)
    assert b'"declared_n":1000' in canonical_json(gauss)
    assert CohortParams.model_validate_json(canonical_json(gauss)) == gauss
    protocol = protocol_for(gauss, [0.0] * 2, [1.0] * 2, b"seed")
    state = protocol.start()
    x = np.random.default_rng(0).uniform(size=(100, 2))
    costs = []
    while not protocol.finished(state):
        costs.append(protocol.cost(state))
        state = protocol.advance(state, [protocol.release(protocol.exact(state, x), state)])
    assert costs[-1].delta == declared_delta(1000)
    assert all(c.delta == 0 for c in costs[:-1])
    assert protocol.finish(state).centroids.shape[1] == 2
