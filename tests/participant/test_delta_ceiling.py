"""The per-release delta ceiling set at enrolment.

``enrol --max-release-delta`` (default 1e-4, the largest delta any valid config may spend in
one release) is stored with the enrolment; every release kind refuses a config spending more
delta in one release before it reads a record or charges anything, through
``participant.release.policy.check_ceiling`` with ``Enrolment.ceiling``.
"""

from __future__ import annotations

import json
from decimal import Decimal

import httpx
import pytest
from release_kit import FakeCoordinator

from common.budget import PrivacyBudget
from common.cohorts.params import CohortParams
from common.errors import BudgetExceeded
from common.online import OnlineParams
from common.study.config import GridParams
from common.study.signing import key_fingerprint
from participant.agent import Agent, DataOptions
from participant.release import policy
from participant.state import DEFAULT_MAX_RELEASE_DELTA, Enrolment, StateDir

SPARSE = GridParams(bins=100, cell_limit=100)  # more cells than cell_limit: sparse


def _enrolled(tmp_path, fake, **kw) -> Agent:
    agent = Agent(tmp_path / "state", transport=httpx.MockTransport(fake), sleep=lambda s: None)
    agent.enrol("http://coord.test", "tok", key_fingerprint(fake.key), epsilon_cap="10",
                delta_cap="1", **kw)
    return agent


def test_old_state_files_load_with_the_default(tmp_path):
    state = StateDir(tmp_path / "state")
    agent = _enrolled(tmp_path, FakeCoordinator())
    doc = json.loads(agent.state.enrolment_path.read_text())
    assert doc["max_release_delta"] == "0.0001"
    del doc["max_release_delta"]  # written before the field existed
    agent.state.enrolment_path.write_text(json.dumps(doc))
    loaded = state.load_enrolment()
    assert loaded.ceiling == PrivacyBudget("2", DEFAULT_MAX_RELEASE_DELTA)


def test_enrol_stores_the_ceiling(tmp_path):
    agent = _enrolled(tmp_path, FakeCoordinator(), max_release_delta="1e-7")
    assert agent.state.load_enrolment().ceiling.delta == Decimal("1e-7")


def test_a_sparse_grid_over_the_ceiling_is_refused_before_reading(tmp_path):
    fake = FakeCoordinator(SPARSE, delta="1e-6")
    agent = _enrolled(tmp_path, fake, max_release_delta="1e-7")
    with pytest.raises(BudgetExceeded, match="asks delta 0.000001, above the per-release "
                       "ceiling 0.0000001") as info:
        agent.contribute("s1", tmp_path / "not-read.csv", DataOptions(), send_slot=0)
    assert info.value.context["source"] == "per-release ceiling" and fake.posts == []
    with agent.ledger() as ledger:
        assert ledger.entries() == []
    at_ceiling = _enrolled(tmp_path / "b", fake, max_release_delta="1e-6")
    policy.check_ceiling(fake.config.release_cost(), at_ceiling.state.load_enrolment().ceiling)


def _independent() -> PrivacyBudget:
    return FakeCoordinator(SPARSE, delta="1e-6").config.release_cost()


def _secure() -> PrivacyBudget:  # a secure round checks config.release_cost() the same way
    return _independent()


def _cohorts() -> PrivacyBudget:
    params = CohortParams(method="kmeans", epsilon=Decimal(1), k=2, rounds=1,
                          sum_noise="gaussian", declared_n=10_000)
    return params.cap()


def _stream() -> PrivacyBudget:
    return OnlineParams(dim=3, delta_gradient="0.000001").epoch_cost()


@pytest.mark.parametrize("cost_of", [_independent, _secure, _cohorts, _stream],
                         ids=["independent", "secure", "cohorts", "stream"])
def test_every_release_kind_is_held_to_the_delta_ceiling(cost_of):
    cost = cost_of()
    assert cost.delta > 0
    low = Enrolment("http://c", "t", "fp", "10", "1", "10", max_release_delta="1e-9")
    with pytest.raises(BudgetExceeded, match="--max-release-delta"):
        policy.check_ceiling(cost, low.ceiling)
    policy.check_ceiling(cost, Enrolment("http://c", "t", "fp", "10", "1", "10").ceiling)
