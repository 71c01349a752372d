"""Federated DPM cohort tree (common.cohorts.dpm)."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pytest

from common.budget import PrivacyBudget
from common.cohorts import (
    DPMPlan,
    TreeState,
    advance,
    finish,
    fit_dpm,
    leaf_statistics,
    level_statistics,
    release_leaves,
    release_level,
    tree_state,
)
from common.cohorts.dpm import choose_split
from common.cohorts.dpm_plan import node_dims
from common.noise.laplace import add_discrete_laplace
from common.noise.scale import discrete_laplace_sd

LO = np.array([-100.0, -50.0, 0.0])
HI = np.array([100.0, 50.0, 10.0])


def _plan(**kw: object) -> DPMPlan:
    args: dict[str, object] = {"lo": LO, "hi": HI, "epsilon": "1", "depth": 3, "bins": 16,
                               "dims_per_node": 2}
    args.update(kw)
    return DPMPlan(**args)  # type: ignore[arg-type]


def _blobs(seed: int, n: int = 300) -> np.ndarray:
    """Three blobs apart on feature 0 (at -60, 0, 60), one public box."""
    rng = np.random.default_rng(seed)
    centres = np.array([[-60.0, 0.0, 5.0], [0.0, 0.0, 5.0], [60.0, 0.0, 5.0]])
    return centres[rng.integers(0, 3, n)] + rng.normal(size=(n, 3)) * [2.0, 2.0, 0.5]


def _grown_state(plan: DPMPlan) -> TreeState:
    """A tree two levels deep with an active leaf, grown from exact (noise-free) histograms
    of the blobs; the first public seed whose chosen features find the gaps."""
    x = _blobs(0, 3000)
    for seed in range(100):
        state = tree_state(plan, f"study{seed}".encode())
        for _ in range(2):
            state = advance(state, level_statistics(x, state, plan), plan)
        if len(state.leaves) >= 3 and state.active:
            return state
    raise AssertionError("no seed grows the tree")


@pytest.mark.parametrize(("epsilon", "depth", "leaf_share"), [
    ("1", 5, "0.4"), ("1", 7, "0.3"), ("0.3", 3, "0.25"), ("2.000000007", 6, "0.5"),
    ("0.00000007", 4, "0.2")])
def test_budget_split_is_exact_over_all_levels_and_the_leaves(epsilon: str, depth: int,
                                                             leaf_share: str) -> None:
    budget = _plan(epsilon=epsilon, depth=depth, leaf_share=leaf_share).budgets()
    assert len(budget.levels) == depth
    assert budget.total == Decimal(epsilon)
    assert sum(budget.levels) + budget.leaf_counts + budget.leaf_histograms == Decimal(epsilon)
    assert max(budget.levels) - min(budget.levels) <= Decimal("1e-9")
    assert min(budget.levels + (budget.leaf_counts, budget.leaf_histograms)) > 0


def test_ledger_over_the_rounds_run_is_exact() -> None:
    """Drive the rounds as the coordinator would and charge each one: the ledger equals the
    plan's epsilon exactly when every level runs, and never exceeds it."""
    plan = _plan(epsilon="0.7", depth=4, bins=32)  # m < d: occupied leaves stay active
    x = _blobs(4, 2000)
    parts = [x[:1000], x[1000:]]
    costs = plan.round_costs()
    spent = PrivacyBudget.zero()
    state = tree_state(plan, b"study")
    while not state.finished(plan):
        summed = sum(release_level(level_statistics(p, state, plan), plan, state.level)
                     for p in parts)
        spent = spent + costs[state.level]
        state = advance(state, summed, plan)
    state = state.close()
    released = [release_leaves(leaf_statistics(p, state, plan), plan) for p in parts]
    spent = spent + costs[-1]
    model = finish(state, released[0] + released[1], plan)
    assert model.k >= 1 and state.level == plan.depth
    assert spent.epsilon == sum((c.epsilon for c in costs), Decimal(0)) == Decimal("0.7")


@pytest.mark.parametrize(("kw", "match"), [
    ({"epsilon": "0.000000005", "depth": 5}, "too small"),
    ({"leaf_share": "1"}, "leaf_share"),
    ({"dims_per_node": 4}, "dims_per_node"),
    ({"bins": 1}, "bins"),
    ({"lo": [0.0, 0.0, 1.0], "hi": [1.0, 1.0, 1.0]}, "upper bound"),
    ({"epsilon": 1.0}, "floats drift"),
])
def test_plan_refuses_what_cannot_be_paid_or_used(kw: dict[str, object], match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        _plan(**kw)


@pytest.mark.parametrize("seed", range(12))
def test_neighbouring_statistics_differ_by_at_most_the_stated_sensitivity(seed: int) -> None:
    plan = _plan()
    rng = np.random.default_rng(seed)
    x = _blobs(seed)
    extra = rng.normal(size=(1, 3)) * 150.0  # often far outside the box: clipped
    for state in (tree_state(plan, b"study"), _grown_state(plan)):
        x_plus = np.vstack([x, extra])
        diff = level_statistics(x_plus, state, plan) - level_statistics(x, state, plan)
        # L1 sensitivity m: attained in an active leaf, 0 in a final one
        assert np.all(diff >= 0) and diff.sum() in (0, plan.m)
        final = state.close()
        a, b = leaf_statistics(x, final, plan), leaf_statistics(x_plus, final, plan)
        assert np.abs(b.counts - a.counts).sum() == 1
        assert np.abs(b.histograms - a.histograms).sum() == plan.d


def _event_log_ratio(noisy_plus: np.ndarray, noisy: np.ndarray, at_least: np.ndarray) -> float:
    """log P[all differing intervals >= D+'s counts | D+] - log P[same | D]."""
    p_plus = np.mean(np.all(noisy_plus >= at_least, axis=1))
    p = np.mean(np.all(noisy >= at_least, axis=1))
    return math.log(p_plus) - math.log(p)


def test_one_level_release_is_epsilon_dp_on_neighbours_and_a_wrong_scale_is_caught() -> None:
    """The event {every interval the extra record touches reaches D+'s count} has the exact
    ratio ``e^(m / scale) = e^epsilon`` for the true scale: the worst case, so the empirical
    log-ratio must land at epsilon; at scale ``1 / epsilon`` (sensitivity misstated as 1) it
    lands at ``m * epsilon``."""
    plan = _plan(epsilon="2.5", leaf_share="0.2", depth=2)
    eps = float(plan.budgets().levels[0])  # 1.0
    state = tree_state(plan, b"study")
    x = _blobs(1)
    stats = level_statistics(x, state, plan)
    stats_plus = level_statistics(np.vstack([x, [[10.0, 3.0, 4.0]]]), state, plan)
    where = np.flatnonzero(stats_plus != stats)
    assert where.size == plan.m
    draws = 20000

    def sample(release: object, s: np.ndarray) -> np.ndarray:
        """``draws`` releases of the intervals the record touches (noise is drawn
        independently per interval at one scale, so the rest of the vector is irrelevant)."""
        noisy = release(np.tile(s[where], draws))  # type: ignore[operator]
        return np.asarray(noisy).reshape(draws, where.size)

    def right(s: np.ndarray) -> np.ndarray:
        return release_level(s, plan, 0)

    def wrong(s: np.ndarray) -> np.ndarray:
        return add_discrete_laplace(s, 1, plan.budgets().levels[0])

    ratio = _event_log_ratio(sample(right, stats_plus), sample(right, stats), stats_plus[where])
    assert abs(ratio - eps) < 0.12, ratio  # about 6 standard errors
    caught = _event_log_ratio(sample(wrong, stats_plus), sample(wrong, stats), stats_plus[where])
    assert caught > eps + 0.5, caught


def test_splits_are_readable_and_separate_blobs() -> None:
    plan = _plan(epsilon="20", depth=3, participants=2, bins=32, min_size=100)
    x = _blobs(2, 6000)
    model = fit_dpm([x[:3000], x[3000:]], plan, b"study")
    assert model.k == 3
    assert sorted(np.rint(model.centroids[:, 0] / 10.0) * 10.0) == [-60.0, 0.0, 60.0]
    truth = np.rint(x[:, 0] / 60.0)
    labels, _ = model.assign(x)
    for c in range(model.k):
        assert np.unique(truth[labels == c]).size == 1  # pure cohorts
        text = model.describe(c, ["age", "bmi", "dose"])
        assert text.startswith("age ") and "bmi" not in text
    thresholds = sorted(cond.threshold for path in model.rules for cond in path)
    assert all(-55.0 < t < -5.0 or 5.0 < t < 55.0 for t in thresholds)
    assert np.isclose(model.masses.sum(), 6000, rtol=0.05)


def test_no_bound_or_interval_comes_from_the_data() -> None:
    plan = _plan()
    small, wide = _blobs(3) * 0.01, _blobs(3) * 100.0
    state = tree_state(plan, b"study")
    assert state.leaves[0].support == ((0, 16),) * 3
    a, b = level_statistics(small, state, plan), level_statistics(wide, state, plan)
    assert a.shape == b.shape == (plan.m * plan.bins,)
    np.testing.assert_array_equal(plan.width, (HI - LO) / 16)
    model = fit_dpm([small], _plan(epsilon="10"), b"study")
    np.testing.assert_array_equal(model.lo, LO)
    np.testing.assert_array_equal(model.hi, HI)


def test_state_round_trips_through_json_and_checks_lengths() -> None:
    plan = _plan()
    state = _grown_state(plan)
    assert len(state.leaves) >= 2 and state.level == 2
    assert TreeState.from_json(state.to_json()) == state
    with pytest.raises(ValueError, match="not a DPM tree state"):
        TreeState.from_json('{"seed": "zz"}')
    with pytest.raises(ValueError, match="summed histograms"):
        advance(tree_state(plan, b"s"), np.zeros(3), plan)


def test_node_dims_come_from_the_seed_only() -> None:
    plan = _plan()
    dims = node_dims(plan, b"study", "01", 2)
    assert dims == node_dims(plan, b"study", "01", 2) and len(set(dims)) == plan.m
    picks = {node_dims(plan, seed.encode(), "", 0) for seed in "abcdefgh"}
    assert len(picks) > 1


@pytest.mark.parametrize(("hist", "min_side", "expected"), [
    ([100, 100, 0, 0, 0, 100], 50.0, (1, 7)),   # middle of the gap, offset by the start 4
    ([100, 100, 0, 0, 0, 100], 150.0, None),    # the smaller side is too light
    ([100, 0, 300, 0, 0, 300, 0, 100], 50.0, (1, 8)),  # the most central gap wins
    ([5, 100, 300, 100, 5], 1.0, None),          # one mode: no gap
])
def test_choose_split_takes_the_most_central_gap(hist: list[int], min_side: float,
                                                 expected: tuple[int, int] | None) -> None:
    flat = [0] * len(hist)
    assert choose_split([flat, hist], [0, 1], [0, 4], 10.0, min_side) == expected


def test_discrete_laplace_sd_matches_opendp() -> None:
    draws = add_discrete_laplace(np.zeros(20000, dtype=np.int64), 3, "1")
    assert abs(draws.std() / discrete_laplace_sd(3.0) - 1.0) < 0.05
