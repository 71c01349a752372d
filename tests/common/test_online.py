"""Private online active learning: query rules, true epsilon, noisy gradients, SGD, accounting."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pytest
from online_kit import ALPHA, hockey_stick
from scipy import stats

from common.budget import PrivacyBudget
from common.online import (
    ExponentialRule,
    OnlineConfig,
    OnlineSVM,
    RandomizedResponseRule,
    apply_step,
    bernoulli,
    ceil_budget,
    hinge_gradient,
    make_gradient_noise,
    project_ball,
    record_cost,
    selection_cost,
    step_size,
)

RNG = np.random.default_rng(11)  # data only; never privacy noise
NAIVE = ExponentialRule(p=0.78, b=0.1, bound=10.0)
"""b * bound = 1: the "queried" branch alone claims epsilon 1; the truth is ~1.176."""


def binom_ok(hits: int, n: int, p: float) -> bool:
    """Two-sided binomial test at ALPHA."""
    return bool(stats.binomtest(hits, n, p).pvalue > ALPHA)


@pytest.mark.parametrize("p", [0.0, 1.0, 0.5, 0.3, 0.0736, 1 / 3])
def test_bernoulli_matches_its_probability(p: float) -> None:
    n = 20_000
    hits = sum(bernoulli(p) for _ in range(n))
    assert binom_ok(hits, n, p)
    if p in (0.0, 1.0):
        assert hits == p * n


def test_bernoulli_refuses_bad_probability() -> None:
    with pytest.raises(ValueError, match="probability must be in"):
        bernoulli(1.5)


@pytest.mark.parametrize(
    ("rule", "margin", "expected"),
    [
        (RandomizedResponseRule(p=0.7, tau=0.5), 0.2, 0.7),
        (RandomizedResponseRule(p=0.7, tau=0.5), -0.5, 0.7),
        (RandomizedResponseRule(p=0.7, tau=0.5), 0.9, 0.3),
        (ExponentialRule(p=0.2, b=0.1, bound=10.0), 0.0, 0.2),
        (ExponentialRule(p=0.2, b=0.1, bound=10.0), -3.0, 0.2 * math.exp(-0.3)),
        (ExponentialRule(p=0.2, b=0.1, bound=10.0), 50.0, 0.2 * math.exp(-1.0)),
    ],
)
def test_query_probability_formula(rule, margin: float, expected: float) -> None:
    assert rule.probability(margin) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "rule", [RandomizedResponseRule(p=0.7, tau=0.3), ExponentialRule(p=0.5, b=0.2, bound=5.0)]
)
def test_learner_queries_with_the_formula_probability(rule) -> None:
    """Empirical query frequency through OnlineSVM.step, at known margins, vs the formula."""
    cfg = OnlineConfig(dim=2, radius_x=1.0, radius_w=5.0, batch=10**9, scheme="records")
    svm = OnlineSVM(cfg, rule=rule)
    svm.w_ = np.array([5.0, 0.0])
    n = 4000
    for margin in (0.0, 1.0, 4.0):
        x = np.array([margin / 5.0, 0.0])
        before = svm.queried_
        for _ in range(n):
            svm.step(x, lambda: 1)
        assert binom_ok(svm.queried_ - before, n, rule.probability(margin))


def brute_force_epsilon(rule, bound: float) -> float:
    """Max log-ratio of both outcomes over a fine grid of margins in [0, bound]."""
    q = np.array([rule.probability(m) for m in np.linspace(0, bound, 2001)])
    return float(max(np.log(q.max() / q.min()), np.log((1 - q).max() / (1 - q).min())))


@pytest.mark.parametrize(
    "rule",
    [
        RandomizedResponseRule(p=math.e / (1 + math.e), tau=0.1),
        RandomizedResponseRule(p=0.2, tau=1.0),
        ExponentialRule(p=0.2, b=0.1, bound=10.0),
        ExponentialRule(p=0.9, b=0.05, bound=10.0),
        NAIVE,
    ],
)
def test_true_epsilon_is_the_max_log_ratio(rule) -> None:
    assert rule.epsilon() == pytest.approx(brute_force_epsilon(rule, 10.0), rel=1e-9)


def test_query_branch_alone_undercharges_the_exponential_rule() -> None:
    assert NAIVE.query_branch_epsilon() == pytest.approx(1.0)
    assert NAIVE.epsilon() == pytest.approx(1.176, abs=1e-3)
    true = math.log((1 - 0.78 * math.exp(-1)) / 0.22)  # the "not queried" branch
    charged = selection_cost(NAIVE).epsilon
    assert Decimal(true) <= charged <= Decimal(true) + Decimal("1e-9")


@pytest.mark.parametrize(("p", "eps"), [(0.1, 1.0), (0.78, 1.0), (0.9, 0.5), (0.5, 0.25)])
def test_for_epsilon_meets_the_target_exactly(p: float, eps: float) -> None:
    rule = ExponentialRule.for_epsilon(p, bound=10.0, epsilon=eps)
    assert rule.epsilon() == pytest.approx(eps, rel=1e-9)


def empirical_selection_epsilon(rule, n: int) -> tuple[float, float]:
    """Query outcome of one record at margin 0 vs margin bound (the neighbouring extremes).

    Returns the empirical max log-ratio over both outcomes and its standard error.
    """
    a = sum(bernoulli(rule.probability(0.0)) for _ in range(n)) / n
    b = sum(bernoulli(rule.probability(rule.bound)) for _ in range(n)) / n
    ratios = [(math.log(a / b), (1 - a) / (n * a) + (1 - b) / (n * b))]
    ratios.append((math.log((1 - b) / (1 - a)), a / (n * (1 - a)) + b / (n * (1 - b))))
    value, var = max(ratios)
    return value, math.sqrt(var)


def test_selection_privacy_on_neighbouring_streams() -> None:
    """The charged epsilon holds; the query-branch-only charge is caught as too small."""
    good = ExponentialRule.for_epsilon(0.2, bound=10.0, epsilon=1.0)
    value, se = empirical_selection_epsilon(good, 20_000)
    assert value <= good.epsilon() + 4 * se
    value, se = empirical_selection_epsilon(NAIVE, 20_000)
    assert value > NAIVE.query_branch_epsilon() + 4 * se  # undercharged: caught
    assert value <= NAIVE.epsilon() + 4 * se


@pytest.mark.parametrize(("project", "caught"), [(True, False), (False, True)])
def test_gradient_release_on_neighbouring_batches(project: bool, caught: bool) -> None:
    """Batches differing in one slot (a record against the empty record, gradient 0): projected
    records stay within the charged (eps, delta); forgetting the projection (a record of norm
    5, sensitivity 5, not 1) is caught."""
    noise = make_gradient_noise(radius=1.0, epsilon=1.0, delta=1e-6)
    w = np.zeros(1)
    rest = [np.array([0.3]), np.array([-0.8])]
    odd_a, odd_b = np.array([5.0]), np.array([0.0])  # the empty record

    def batch_sum(odd: np.ndarray) -> float:
        rows = [*rest, odd]
        rows = [project_ball(r, 1.0) if project else r for r in rows]
        return float(sum(hinge_gradient(w, r, 1) for r in rows)[0])

    n = 12_000
    a = noise.release(np.full(n, batch_sum(odd_a)))  # n independent releases of batch A
    b = noise.release(np.full(n, batch_sum(odd_b)))
    delta_hat = hockey_stick(a, b, noise.epsilon)
    if caught:
        assert delta_hat > 0.05
    else:
        assert delta_hat <= noise.delta + 0.02


def test_gradient_noise_scale_and_accounting() -> None:
    noise = make_gradient_noise(radius=1.0, epsilon=1.0, delta=1e-6)
    assert 1.0 < noise.sensitivity <= 1.0 + 1e-9  # M (one slot) plus float slack
    assert 0.999 <= noise.accounted_epsilon() <= 1.0
    draws = noise.release(np.zeros(6000))
    # chi-square test of the sample variance against scale**2
    stat = float(np.sum(draws**2) / noise.scale**2)
    assert stats.chi2(6000).sf(stat) > ALPHA and stats.chi2(6000).cdf(stat) > ALPHA


def test_gradient_noise_refuses_bad_parameters() -> None:
    with pytest.raises(ValueError, match="radius must be > 0"):
        make_gradient_noise(0.0, 1.0, 1e-6)
    with pytest.raises(ValueError, match="delta must be in"):
        make_gradient_noise(1.0, 1.0, 0.0).scale  # noqa: B018
    with pytest.raises(ValueError, match="must be finite"):
        make_gradient_noise(1.0, 1.0, 1e-6).release(np.array([np.nan]))


def test_projection() -> None:
    v = RNG.normal(size=(200, 5)) * 3
    for row in v:
        out = project_ball(row, 2.0)
        assert np.linalg.norm(out) <= 2.0 + 1e-12
        if np.linalg.norm(row) <= 2.0:
            np.testing.assert_array_equal(out, row)
        else:
            np.testing.assert_allclose(out / np.linalg.norm(out), row / np.linalg.norm(row))


def test_step_sizes_and_one_step() -> None:
    assert step_size(1, 2.0) == 2.0
    assert step_size(4, 2.0) == 1.0
    with pytest.raises(ValueError, match="update number"):
        step_size(0, 1.0)
    cfg = OnlineConfig(dim=2, radius_w=1.0, lam=0.5, eta0=1.0)
    w = np.array([0.2, 0.0])
    out = apply_step(w, 4, noisy_sum=np.array([-1.0, -2.0]), count=2, config=cfg)
    np.testing.assert_allclose(out, project_ball(w - 0.5 * (0.5 * w + [-0.5, -1.0]), 1.0))
    assert np.linalg.norm(out) <= 1.0 + 1e-12


def test_hinge_gradient() -> None:
    x = np.array([1.0, 2.0])
    np.testing.assert_array_equal(hinge_gradient(np.zeros(2), x, -1), x)
    np.testing.assert_array_equal(hinge_gradient(np.array([1.0, 0.0]), x, 1), np.zeros(2))
    with pytest.raises(ValueError, match="label must be"):
        hinge_gradient(np.zeros(2), x, 0)


@pytest.mark.parametrize("scheme", ["records", "labels"])
def test_batching_schemes(scheme: str) -> None:
    cfg = OnlineConfig(dim=3, batch=5, scheme=scheme)  # type: ignore[arg-type]
    svm = OnlineSVM(cfg, rule=RandomizedResponseRule(p=0.5, tau=0.0))
    for x in RNG.normal(size=(400, 3)):
        svm.step(x, lambda: 1)
    if scheme == "labels":
        assert svm.updates_ == svm.queried_ // 5
    else:
        assert svm.updates_ <= svm.seen_ // 5
        assert svm.updates_ >= (svm.seen_ // 5) * 0.9  # a 5-record window is rarely unlabelled


def test_learner_refuses_wrong_width() -> None:
    with pytest.raises(ValueError, match="3 features"):
        OnlineSVM(OnlineConfig(dim=3)).step(np.zeros(4), lambda: 1)


def test_non_private_learner_separates_digits() -> None:
    from sklearn.datasets import load_digits

    d = load_digits()
    keep = np.isin(d.target, [0, 9])
    X, y = (d.data[keep] / 16.0 - 0.5) / 4.0, np.where(d.target[keep] == 0, 1, -1)
    svm = OnlineSVM(OnlineConfig(dim=64, radius_w=10.0, batch=5))
    for i in RNG.permutation(len(y)):
        svm.step(X[i], lambda i=i: int(y[i]))
    assert np.mean(svm.predict(X) != y) < 0.03


def test_record_cost_sums_selection_and_gradient() -> None:
    rule = ExponentialRule.for_epsilon(0.2, bound=10.0, epsilon=1.0)
    noise = make_gradient_noise(1.0, 1.0, 1e-6)
    cost = record_cost(rule, noise)
    assert Decimal(2) <= cost.epsilon <= Decimal(2) + Decimal("1e-9")
    assert cost.delta == Decimal("1e-6")
    assert record_cost(NAIVE, noise).epsilon == selection_cost(NAIVE).epsilon + 1
    assert record_cost(None, noise) == PrivacyBudget("1", "1e-6")
    assert ceil_budget(0.1).epsilon == Decimal("0.100000001")  # float 0.1 > 1/10: rounded up
