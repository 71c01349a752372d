"""What a participant refuses of a coordinator's cohort round before reading or drawing."""

from __future__ import annotations

import pytest

from common.budget import PrivacyBudget
from common.cohorts.params import CohortParams
from common.cohorts.protocol import CohortState, protocol_for
from common.config import FeatureSpec, PrivacyParams, new_study_config
from common.errors import BudgetExceeded, ConfigError
from participant.cohorts import _check_round

CONFIG = new_study_config(
    "s", [FeatureSpec(name=f"x{i}", lo=0.0, hi=1.0) for i in range(2)],
    privacy=PrivacyParams(epsilon_lsh="0.5"), n_tables=2,
    cohorts=CohortParams(k=2, over=1, rounds=3, epsilon="1.5"))
PROTOCOL = protocol_for(CONFIG.cohorts, CONFIG.lo, CONFIG.hi, bytes.fromhex(CONFIG.lsh.seed))
START = PROTOCOL.start()


def test_a_round_the_config_allows_costs_its_share() -> None:
    assert _check_round(CONFIG, PROTOCOL, START, PrivacyBudget.zero()) == PrivacyBudget("0.5")


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

