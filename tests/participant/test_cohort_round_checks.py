"""What a participant refuses of a coordinator's cohort round before reading or drawing."""

from __future__ import annotations

import pytest

from common.budget import PrivacyBudget
from common.cohorts.params import CohortParams
from common.cohorts.protocol import CohortState
from common.cohorts.study import protocol_for
from common.errors import BudgetExceeded, ConfigError
from common.study.config import FeatureSpec, PrivacyParams, new_study_config
from participant.cohorts.rounds import _check_round

CONFIG = new_study_config(
    "s", [FeatureSpec(name=f"x{i}", lo=0.0, hi=1.0) for i in range(2)],
    privacy=PrivacyParams(epsilon_lsh="0.5"), n_tables=2,
    cohorts=CohortParams(k=2, over=1, rounds=3, epsilon="1.5"))
PROTOCOL = protocol_for(CONFIG.cohorts, CONFIG.lo, CONFIG.hi, bytes.fromhex(CONFIG.lsh.seed))
START = PROTOCOL.start()


def test_a_round_the_config_allows_costs_its_share() -> None:
    assert _check_round(CONFIG, PROTOCOL, START, PrivacyBudget.zero()).cost == PrivacyBudget("0.5")


@pytest.mark.parametrize("state", [
    CohortState(3, START.data),  # round 4 of 3
    CohortState(0, {"centroids": [[0.5, 0.5, 0.5]] * 2, "counts": [0, 0]}),  # wrong shape
    CohortState(0, {}),  # no centroids
])
def test_rounds_outside_the_signed_config_are_refused(state) -> None:
    with pytest.raises(ConfigError, match="not one the signed config allows"):
        _check_round(CONFIG, PROTOCOL, state, PrivacyBudget.zero())


def test_cohort_spending_never_passes_the_signed_cohort_epsilon() -> None:
    """A coordinator replaying rounds under new numbers cannot make us spend more."""
    assert _check_round(CONFIG, PROTOCOL, CohortState(2, START.data), PrivacyBudget("1"))
    with pytest.raises(BudgetExceeded, match="signed cohort epsilon 1.5"):
        _check_round(CONFIG, PROTOCOL, CohortState(2, START.data), PrivacyBudget("1.5"))


def test_gaussian_kmeans_rounds_fit_the_signed_delta_and_not_more() -> None:
    """Gaussian sums: each round charges its share of 1/(n sqrt n); the signed cohort budget
    pays all T shares (not one round's delta once) and refuses anything past them."""
    config = new_study_config(
        "g", [FeatureSpec(name=f"x{i}", lo=0.0, hi=1.0) for i in range(2)],
        privacy=PrivacyParams(epsilon_lsh="0.5"), n_tables=2,
        cohorts=CohortParams(k=2, over=1, rounds=3, epsilon="1.5", sum_noise="gaussian",
                             declared_n=1000))
    assert config.cohorts is not None
    protocol = protocol_for(config.cohorts, config.lo, config.hi,
                            bytes.fromhex(config.lsh.seed))
    state = protocol.start()
    costs = [protocol.cost(CohortState(r, state.data)) for r in range(3)]
    assert all(c.delta > 0 for c in costs)
    assert sum(costs, PrivacyBudget.zero()) == config.cohorts.cap()
    spent = costs[0] + costs[1]
    assert _check_round(config, protocol, CohortState(2, state.data), spent).cost == costs[2]
    extra = PrivacyBudget(0, "1e-18")  # one quantum of delta more than the signed budget
    with pytest.raises(BudgetExceeded, match="signed cohort epsilon"):
        _check_round(config, protocol, CohortState(2, state.data), spent + extra)



def test_adaptive_round_the_local_cap_cannot_pay_is_refused_before_noise(tmp_path,
                                                                          monkeypatch) -> None:
    """Rounds of 0.25, 0.5, 0.75 (adaptive, epsilon 1.5 over 3): with 0.75 spent, a cap of
    1.25 would pay an even round (0.5) but not the adaptive last round; nothing is drawn."""
    from participant.agent import Agent, DataOptions
    from participant.cohorts import rounds as part
    from participant.state import Enrolment

    config = new_study_config(
        "s", [FeatureSpec(name=f"x{i}", lo=0.0, hi=1.0) for i in range(2)],
        privacy=PrivacyParams(epsilon_lsh="0.5"), n_tables=2,
        cohorts=CohortParams(k=2, over=1, rounds=3, epsilon="1.5", schedule="adaptive"))
    protocol = protocol_for(config.cohorts, config.lo, config.hi,
                            bytes.fromhex(config.lsh.seed))
    costs = [protocol.cost(CohortState(r, START.data)) for r in range(3)]
    assert costs == [PrivacyBudget("0.25"), PrivacyBudget("0.5"), PrivacyBudget("0.75")]

    def no_noise(*_: object) -> None:
        raise AssertionError("noise was drawn")

    monkeypatch.setattr("common.noise.laplace.add_discrete_laplace", no_noise)
    agent = Agent(tmp_path / "state")
    enrolment = Enrolment("http://coord.test", "tok", "fp", epsilon_cap="1.25",
                          max_release_epsilon="1")
    with agent.ledger() as ledger:
        for r in (1, 2):
            ledger.reserve(idempotency_key=f"cohort-s-{r}", study="s", config_version=1,
                           config_digest="", cost=costs[r - 1], cap=enrolment.cap)
    path = tmp_path / "round-3.json"
    with pytest.raises(BudgetExceeded, match="local cap"):
        part._draw(agent, config, protocol, 3, CohortState(2, START.data), None,
                   DataOptions(), enrolment, path, None)  # type: ignore[arg-type]
    assert not path.exists()
    with agent.ledger() as ledger:
        assert ledger.spent() == PrivacyBudget("0.75")
