"""Federated DP k-means with fusion (common.cohorts.kmeans)."""

from __future__ import annotations

import hashlib
import math
import struct
from decimal import Decimal

import numpy as np
import pytest

from common.budget import PrivacyBudget
from common.cohorts import (
    KMeansPlan,
    RoundRelease,
    fit_federated,
    fuse_centroids,
    initial_centroids,
    release_round,
    round_statistics,
    split_epsilon,
    update_centroids,
)
from common.noise.laplace import add_discrete_laplace

LO = np.array([-4.0, 0.0, -10.0])
HI = np.array([6.0, 2.0, 3.0])


def _plan(**kw: object) -> KMeansPlan:
    args: dict[str, object] = {"lo": LO, "hi": HI, "k": 2, "epsilon": "1", "over": 2}
    args.update(kw)
    return KMeansPlan(**args)  # type: ignore[arg-type]


def _data(seed: int, n: int = 200) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 3)) * 4.0


def test_init_is_deterministic_in_the_box_and_seed_dependent() -> None:
    a = initial_centroids(b"study", 5, LO, HI)
    np.testing.assert_array_equal(a, initial_centroids(b"study", 5, LO, HI))
    assert a.shape == (5, 3) and np.all(a >= LO) and np.all(a <= HI)
    assert not np.array_equal(a, initial_centroids(b"other", 5, LO, HI))
    # the count is part of the stream's key, so a different count is a different draw
    assert not np.array_equal(a[:3], initial_centroids(b"study", 3, LO, HI))


def test_init_never_reads_data_or_numpy_randomness() -> None:
    np.random.seed(1)
    first = initial_centroids(b"s", 4, LO, HI)
    np.random.seed(2)
    np.random.default_rng(3).normal(size=10)
    np.testing.assert_array_equal(first, initial_centroids(b"s", 4, LO, HI))
    # the documented stream, recomputed here: every participant derives the same start
    key = b"fedod-kmeans-init/1\x00" + struct.pack("<I", 1) + b"s" + struct.pack("<II", 4, 3)
    words = struct.unpack("<4Q", hashlib.sha256(key + bytes(8)).digest())[:3]
    expected = [lo + (hi - lo) * ((w >> 11) * 2.0**-53)
                for lo, hi, w in zip(LO, HI, words, strict=True)]
    assert first[0].tolist() == expected


def test_statistics_clip_and_count_every_record() -> None:
    plan = _plan()
    cents = np.array([[0.0, 1.0, 0.0], [5.0, 1.0, 2.0]])
    x = np.array([[100.0, 5.0, 100.0], [-1.0, 1.0, -1.0], [0.2, 1.0, 0.1]])
    stats = round_statistics(x, cents, plan)
    np.testing.assert_array_equal(stats.counts, [2, 1])
    clipped = np.clip(x, LO, HI)
    np.testing.assert_allclose(stats.sums[1] * plan.step, clipped[0], atol=plan.step)
    np.testing.assert_allclose(stats.sums[0] * plan.step, clipped[1:].sum(0), atol=2 * plan.step)
    empty = round_statistics(np.zeros((0, 3)), cents, plan)
    assert empty.counts.sum() == 0 and not empty.sums.any()


@pytest.mark.parametrize("seed", range(20))
def test_neighbouring_statistics_differ_by_at_most_the_sensitivity(seed: int) -> None:
    plan = _plan()
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(50, 3)) * 20.0  # many records far outside the box
    extra = rng.normal(size=(1, 3)) * 50.0
    cents = initial_centroids(b"sens", plan.n_centroids, LO, HI)
    a = round_statistics(x, cents, plan)
    b = round_statistics(np.vstack([x, extra]), cents, plan)
    assert np.abs(a.counts - b.counts).sum() == 1
    l1 = int(np.abs(a.sums - b.sums).sum())
    assert l1 <= plan.sum_sensitivity
    stated = float(np.maximum(np.abs(LO), np.abs(HI)).sum())  # 6 + 2 + 10
    assert l1 * plan.step <= stated + 3 * plan.step
    assert plan.sum_sensitivity * plan.step == pytest.approx(stated, abs=3 * plan.step)


_ONE_ROUND = _plan(epsilon="5", rounds=1)  # counts get 0.2 * 5 = 1


def _count_log_ratio(epsilon: float, n: int) -> float:
    """Largest empirical |log P(E | D) / P(E | D')| over the events {count <= c} and
    {count >= c + 1} for one round's released counts on neighbouring D, D' = D + one record
    (cluster c gains the record). Each released vector is tiled ``n`` times in one OpenDP
    call: the same mechanism applied coordinate-wise, i.e. ``n`` independent releases."""
    plan = _plan()
    cents = np.array([[0.0, 1.0, 0.0], [5.0, 1.0, 2.0]])
    x = np.array([[0.0, 1.0, 0.0]] * 7 + [[5.0, 1.0, 2.0]] * 3)
    extra = np.array([[4.0, 1.0, 2.0]])
    a = round_statistics(x, cents, plan).counts
    b = round_statistics(np.vstack([x, extra]), cents, plan).counts
    assert list(b - a) == [0, 1]
    eps = Decimal(str(epsilon))
    na = add_discrete_laplace(np.tile(a, n), 1, eps).reshape(n, 2)[:, 1]
    nb = add_discrete_laplace(np.tile(b, n), 1, eps).reshape(n, 2)[:, 1]
    worst = 0.0
    for ea, eb in ((na <= a[1], nb <= a[1]), (na >= b[1], nb >= b[1])):
        worst = max(worst, abs(math.log(ea.mean() / eb.mean())))
    return worst


def test_released_counts_are_epsilon_dp_on_neighbours() -> None:
    """The exact log ratio of both events is epsilon; with 40 000 draws the estimate's
    standard error is about 0.01, so epsilon + 0.06 is five of them."""
    eps = float(_ONE_ROUND.budgets()[0][0])
    assert eps == 1.0
    assert _count_log_ratio(eps, 40_000) <= eps + 0.06


def test_under_noised_counts_are_caught() -> None:
    eps = float(_ONE_ROUND.budgets()[0][0])
    assert _count_log_ratio(2 * eps, 40_000) > eps + 0.06


def test_release_charges_the_round_budget_and_is_immutable() -> None:
    plan = _plan(rounds=3, epsilon="1")
    stats = round_statistics(_data(0), initial_centroids(b"r", 4, LO, HI), plan)
    rel = release_round(stats, plan, 0)
    assert rel.cost == PrivacyBudget(sum(plan.budgets()[0]))
    assert rel.sums.shape == (4, 3) and rel.counts.shape == (4,)
    with pytest.raises(ValueError):
        rel.counts[0] = 1


@pytest.mark.parametrize(
    ("epsilon", "rounds", "share"),
    [("1", 3, "0.2"), ("0.5", 7, "0.5"), ("2", 10, "0.3"), ("0.000000023", 11, "0.5"),
     ("1", 3, "0.333")],
)
def test_ledger_over_rounds_equals_the_budget_exactly(epsilon: str, rounds: int,
                                                      share: str) -> None:
    parts = split_epsilon(epsilon, rounds, share)
    assert len(parts) == rounds
    assert sum(c + s for c, s in parts) == Decimal(epsilon)
    spent = PrivacyBudget.zero()
    for c, s in parts:
        spent = spent + PrivacyBudget(c) + PrivacyBudget(s)
    assert spent == PrivacyBudget(epsilon)


def test_fit_spends_exactly_the_configured_budget() -> None:
    plan = _plan(rounds=3, epsilon="0.7")
    _, _, spent = fit_federated([_data(1), _data(2)], plan, b"fit")
    assert spent.epsilon == Decimal("0.7")


@pytest.mark.parametrize(("epsilon", "rounds", "share"),
                         [("0.00000001", 11, "0.5"), ("1", 2, "1"), ("1", 0, "0.5")])
def test_split_refuses_what_cannot_be_paid(epsilon: str, rounds: int, share: str) -> None:
    with pytest.raises(ValueError):
        split_epsilon(epsilon, rounds, share)


def test_update_keeps_centroids_with_zero_or_negative_noisy_counts() -> None:
    plan = _plan()
    prev = np.array([[1.0, 1.0, 1.0], [2.0, 1.0, 2.0], [-3.0, 0.5, -3.0], [0.0, 0.0, 0.0]])
    step = plan.step
    sums = np.array([[10, 10, 10], [-5, 7, 3], [1, 1, 1], [40, 4, 4]]) / step
    rel = RoundRelease(sums=np.rint(sums).astype(np.int64), counts=np.array([10, 0, -3, 2]),
                       cost=PrivacyBudget("1"))
    new, counts = update_centroids([rel], prev, plan, min_count=1.0)
    np.testing.assert_allclose(new[0], [1.0, 1.0, 1.0], atol=step)
    np.testing.assert_array_equal(new[1], prev[1])
    np.testing.assert_array_equal(new[2], prev[2])
    np.testing.assert_allclose(new[3], [6.0, 2.0, 2.0], atol=step)  # clipped to the box
    np.testing.assert_array_equal(counts, [10, 0, -3, 2])
    assert np.all(np.isfinite(new))


def test_fusion_reduces_to_k_and_preserves_weight() -> None:
    cents = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.0, 5.2], [9.0, 0.0], [20.0, 20.0]])
    weights = np.array([3.0, 1.0, 2.0, -4.0, 0.0, 5.0])
    fused, w = fuse_centroids(cents, weights, 3)
    assert fused.shape == (3, 2)
    assert w.sum() == pytest.approx(np.maximum(weights, 0).sum())
    np.testing.assert_allclose(fused[0], [0.025, 0.0])  # 3:1 weighted
    np.testing.assert_allclose(fused[1], [5.0, 5.0])  # partner weighs 0 (negative count)


def test_fit_recovers_well_separated_blobs() -> None:
    centres = np.array([[-3.0, 1.0, -7.0], [4.0, 1.0, 1.0]])
    rng = np.random.default_rng(5)
    x = np.vstack([c + rng.normal(scale=0.3, size=(2000, 3)) for c in centres])
    parts = np.array_split(rng.permutation(x), 2)
    fused, w, _ = fit_federated(parts, _plan(epsilon="5", over=3), b"blobs")
    found = fused[np.argsort(fused[:, 0])]
    np.testing.assert_allclose(found, centres, atol=0.5)
    assert w.sum() == pytest.approx(4000, rel=0.1)


def test_plan_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="k must be"):
        _plan(k=0)
    with pytest.raises(ValueError, match="bound"):
        _plan(lo=HI, hi=LO)
    with pytest.raises(TypeError):
        _plan(epsilon=1.0)
    with pytest.raises(ValueError, match="columns"):
        round_statistics(np.zeros((3, 2)), np.zeros((2, 3)), _plan())


def test_pruning_drops_light_centroids_but_keeps_k() -> None:
    cents = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [9.0, 9.0]])
    weights = np.array([3.0, 1.0, 50.0, 2.0])
    fused, w = fuse_centroids(cents, weights, 2, min_weight=2.5)
    np.testing.assert_array_equal(fused, [[0.0, 0.0], [5.0, 5.0]])
    np.testing.assert_array_equal(w, [3.0, 50.0])
    fused, w = fuse_centroids(cents, weights, 3, min_weight=100.0)  # the 3 heaviest stay
    np.testing.assert_array_equal(w, [3.0, 50.0, 2.0])
