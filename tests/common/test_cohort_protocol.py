"""The cohort round protocol (common.cohorts.protocol): state, exact vectors, the k-means
round's release on neighbouring datasets, and the coordinator's update and fusion."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pytest

from common.budget import PrivacyBudget
from common.cohorts import kmeans
from common.cohorts.params import CohortParams
from common.cohorts.protocol import CohortState, KMeansProtocol
from common.cohorts.study import protocol_for
from common.errors import ReleaseOutOfBounds
from common.noise.laplace import add_discrete_laplace

LO, HI = [-4.0, 0.0, -10.0], [6.0, 2.0, 3.0]
PARAMS = CohortParams(k=2, over=2, rounds=3, epsilon="1.5")


def _protocol(params: CohortParams = PARAMS, lo=LO, hi=HI) -> KMeansProtocol:
    proto = protocol_for(params, lo, hi, b"study-seed")
    assert isinstance(proto, KMeansProtocol)
    return proto


def _data(seed: int, n: int = 300) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 3)) * 4.0


def test_start_is_the_seeded_init_and_survives_json_exactly() -> None:
    proto = _protocol()
    state = proto.start()
    np.testing.assert_array_equal(state.data["centroids"],
                                  kmeans.initial_centroids(b"study-seed", 4, LO, HI))
    again = CohortState.from_json(state.to_json())
    assert again == state and proto.size(state) == 4 * 4


def test_exact_vector_is_additive_over_chunks_and_counts_every_record() -> None:
    proto, X = _protocol(), _data(1)
    state = proto.start()
    whole = proto.exact(state, X)
    np.testing.assert_array_equal(whole, sum(proto.exact(state, c) for c in np.array_split(X, 7)))
    assert whole[-4:].sum() == len(X)


def test_round_costs_sum_to_the_signed_epsilon() -> None:
    proto = _protocol()
    costs = [proto.cost(CohortState(r, {})) for r in range(proto.rounds)]
    assert sum((c.epsilon for c in costs), Decimal(0)) == PARAMS.epsilon


def test_release_noises_counts_and_sums_at_their_stated_sensitivities(monkeypatch) -> None:
    proto, calls = _protocol(), []

    def spy(values, sensitivity, epsilon):
        calls.append((np.asarray(values).shape, sensitivity, epsilon))
        return add_discrete_laplace(values, sensitivity, epsilon)

    monkeypatch.setattr("common.noise.laplace.add_discrete_laplace", spy)
    exact = proto.exact(proto.start(), _data(2))
    noisy = proto.release(exact, CohortState(1, {}))
    eps_counts, eps_sums = proto.plan.budgets()[1]
    assert calls == [((12,), proto.plan.sum_sensitivity, eps_sums), ((4,), 1, eps_counts)]
    assert noisy.shape == exact.shape and not np.array_equal(noisy, exact)


def _sum_log_ratio(sensitivity_used: int, n: int) -> tuple[float, float]:
    """One k-means round on neighbours D, D + one record at the box's edge (d = 1, one
    cluster): the sum moves by exactly S. Empirical log P(E | D') / P(E | D) for E = {noisy
    sum >= exact sum of D'}; for discrete Laplace of scale S / eps the exact value is eps.
    Tiling draws ``n`` independent releases in one OpenDP call."""
    params = CohortParams(k=1, over=1, rounds=1, epsilon="1", count_share="0.2")
    proto = _protocol(params, [-1.0], [1.0])
    x = np.random.default_rng(3).uniform(-1, 1, size=(50, 1))
    a = proto.exact(proto.start(), x)
    b = proto.exact(proto.start(), np.vstack([x, [[5.0]]]))  # clipped to 1
    s = proto.plan.sum_sensitivity
    assert int(b[0] - a[0]) == s and int(b[1] - a[1]) == 1
    eps_sums = proto.plan.budgets()[0][1]
    na = add_discrete_laplace(np.full(n, a[0]), sensitivity_used, eps_sums)
    nb = add_discrete_laplace(np.full(n, b[0]), sensitivity_used, eps_sums)
    return math.log((nb >= b[0]).mean() / (na >= b[0]).mean()), float(eps_sums)


def test_released_sums_are_epsilon_dp_on_neighbours() -> None:
    """40 000 draws: the estimate's standard error is about 0.011; epsilon + 0.06 allows 5."""
    ratio, eps = _sum_log_ratio(_protocol(CohortParams(k=1, over=1, rounds=1, epsilon="1"),
                                          [-1.0], [1.0]).plan.sum_sensitivity, 40_000)
    assert abs(ratio - eps) < 0.06


def test_sums_noised_for_half_the_sensitivity_are_caught() -> None:
    proto = _protocol(CohortParams(k=1, over=1, rounds=1, epsilon="1"), [-1.0], [1.0])
    ratio, eps = _sum_log_ratio(proto.plan.sum_sensitivity // 2, 40_000)
    assert ratio > eps + 0.06


def test_advance_and_finish_are_the_kmeans_update_and_fusion() -> None:
    proto = _protocol()
    parts = [_data(10), _data(11) + 2.0]
    state, cents = proto.start(), proto.start().data["centroids"]
    for r in range(proto.rounds):
        vectors = [proto.exact(state, X) for X in parts]  # noise-free: exact arithmetic
        state = proto.advance(state, vectors)
        stats = [kmeans.round_statistics(X, cents, proto.plan) for X in parts]
        cost = proto.cost(CohortState(r, {}))
        releases = [kmeans.RoundRelease(s.sums, s.counts, cost) for s in stats]
        cents, counts = kmeans.update_centroids(releases, cents, proto.plan,
                                                kmeans.count_floor(proto.plan, r, 2))
        np.testing.assert_array_equal(state.data["centroids"], cents)
        assert state.done == r + 1 and state.participants == 2
    model = proto.finish(CohortState.from_json(state.to_json()))
    fused, weights = kmeans.fuse_centroids(cents, counts, 2,
                                           kmeans.count_floor(proto.plan, 2, 2))
    np.testing.assert_array_equal(model.centroids, fused)
    np.testing.assert_array_equal(model.masses, weights)
    assert model.masses.sum() <= 600 and model.k == 2


@pytest.mark.parametrize("vector", [np.zeros(3, dtype=np.int64), np.zeros(17, dtype=np.int64)])
def test_vectors_of_the_wrong_length_are_refused(vector) -> None:
    proto = _protocol()
    with pytest.raises(ReleaseOutOfBounds, match="16 values"):
        proto.advance(proto.start(), [vector])


def test_a_release_costs_what_the_round_is_charged() -> None:
    proto = _protocol()
    assert proto.cost(proto.start()) == PrivacyBudget(sum(proto.plan.budgets()[0]))
