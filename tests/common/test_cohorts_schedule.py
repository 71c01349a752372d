"""DP-KCCM's adaptive budget split (common.cohorts.plan.round_weights).

The split is fixed by public inputs (the number of rounds and the schedule's name in the
signed config) and must charge exactly the configured epsilon over the rounds.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest

from common.budget import PrivacyBudget
from common.cohorts import KMeansPlan, fit_federated
from common.cohorts.params import CohortParams
from common.cohorts.plan import round_weights, split_epsilon
from common.cohorts.study import protocol_for
from common.study.config import canonical_json

LO, HI = [-1.0, -1.0], [1.0, 1.0]


def test_twelve_adaptive_rounds_are_the_papers_split() -> None:
    """Ni et al. section 3.1: epsilon/24 for rounds 1-4, /12 for 5-8, /8 for 9-12."""
    totals = [c + s for c, s in split_epsilon("2.4", 12, "0.2", "adaptive")]
    assert totals == [Decimal("0.1")] * 4 + [Decimal("0.2")] * 4 + [Decimal("0.3")] * 4


@pytest.mark.parametrize("rounds", [1, 2, 3, 5, 7, 12, 100])
def test_adaptive_weights_never_decrease_and_even_ones_are_flat(rounds: int) -> None:
    weights = round_weights(rounds, "adaptive")
    assert len(weights) == rounds and weights[0] == 1
    assert all(a <= b for a, b in zip(weights, weights[1:], strict=False))
    assert weights[-1] == min(3, rounds)
    assert round_weights(rounds, "even") == (1,) * rounds


def test_unknown_schedules_and_round_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="schedule"):
        round_weights(3, "geometric")
    with pytest.raises(ValueError, match="rounds"):
        round_weights(0, "adaptive")


@pytest.mark.parametrize(
    ("epsilon", "rounds", "share"),
    [("1", 5, "0.2"), ("0.5", 7, "0.5"), ("2", 12, "0.3"), ("0.000000061", 11, "0.5"),
     ("1", 3, "0.333"), ("0.7", 100, "0.2")],
)
def test_adaptive_ledger_over_rounds_equals_the_budget_exactly(epsilon: str, rounds: int,
                                                               share: str) -> None:
    parts = split_epsilon(epsilon, rounds, share, "adaptive")
    spent = PrivacyBudget.zero()
    for c, s in parts:
        assert c > 0 and s > 0
        spent = spent + PrivacyBudget(c) + PrivacyBudget(s)
    assert spent == PrivacyBudget(epsilon)
    totals = [c + s for c, s in parts]
    assert totals[-1] > totals[0]  # later rounds get more epsilon, so less noise


def test_even_schedule_is_unchanged_by_the_weights() -> None:
    """The even split is the one signed before schedules existed: remainder units first."""
    totals = [c + s for c, s in split_epsilon("0.000000010", 3, "0.5")]
    assert totals == [Decimal("0.000000004"), Decimal("0.000000003"), Decimal("0.000000003")]


@pytest.mark.parametrize(("epsilon", "rounds"), [("0.000000010", 12), ("0.000000025", 12)])
def test_adaptive_split_refuses_what_cannot_be_paid(epsilon: str, rounds: int) -> None:
    """The first rounds get the least: a split leaving any of their parts at zero is refused
    (at plan and at config time), even where the even split of the same epsilon passes."""
    if epsilon == "0.000000025":
        assert len(split_epsilon(epsilon, rounds, "0.5")) == rounds  # 2-3 units a round
    with pytest.raises(ValueError, match="too small"):
        split_epsilon(epsilon, rounds, "0.5", "adaptive")
    with pytest.raises(ValueError, match="too small"):
        KMeansPlan(lo=LO, hi=HI, k=2, epsilon=epsilon, rounds=rounds, schedule="adaptive")
    with pytest.raises(ValueError, match="too small"):
        CohortParams(k=2, epsilon=epsilon, rounds=rounds, count_share="0.5",
                     schedule="adaptive")


def test_adaptive_fit_and_protocol_charge_each_round_its_share() -> None:
    params = CohortParams(k=2, over=2, rounds=4, epsilon="1.3", schedule="adaptive")
    protocol = protocol_for(params, LO, HI, b"seed")
    x = np.random.default_rng(0).uniform(-1, 1, size=(300, 2))
    state, costs = protocol.start(), []
    for _ in range(protocol.rounds):
        costs.append(protocol.cost(state))
        state = protocol.advance(state, [protocol.release(protocol.exact(state, x), state)])
    expected = [PrivacyBudget(c + s) for c, s in split_epsilon("1.3", 4, "0.2", "adaptive")]
    assert costs == expected
    assert sum(costs, PrivacyBudget.zero()) == PrivacyBudget("1.3")
    plan = KMeansPlan(lo=LO, hi=HI, k=2, over=2, rounds=4, epsilon="1.3", schedule="adaptive")
    assert fit_federated([x[:150], x[150:]], plan, b"fit")[2] == PrivacyBudget("1.3")


def test_schedule_is_signed_but_even_keeps_old_canonical_json() -> None:
    even = CohortParams(k=2, epsilon="1")
    assert b"schedule" not in canonical_json(even)
    adaptive = CohortParams(k=2, epsilon="1", schedule="adaptive")
    assert b'"schedule":"adaptive"' in canonical_json(adaptive)
    assert CohortParams.model_validate_json(canonical_json(adaptive)) == adaptive
    with pytest.raises(ValueError, match="kmeans only"):
        CohortParams(method="dpm", epsilon="1", schedule="adaptive")
