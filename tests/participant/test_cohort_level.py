"""Issue 25 item 14: the DPM level (and k-means round index) a participant noises and charges
comes from the coordinator's state; one outside the public plan is refused before any ledger
entry, data read or noise, and at every valid level the cost charged is the cost the noise
was calibrated for, checked against OpenDP's own privacy map."""

from __future__ import annotations

import copy
import json
from decimal import Decimal
from types import SimpleNamespace

import numpy as np
import pytest

from common.budget import PrivacyBudget
from common.cohorts.params import CohortParams
from common.cohorts.protocol import CohortState
from common.cohorts.study import protocol_of
from common.errors import ConfigError, ReleaseOutOfBounds
from common.study.config import FeatureSpec, PrivacyParams, new_study_config
from participant.agent import Agent, DataOptions
from participant.cohorts import rounds as part
from participant.release import policy
from participant.state import Enrolment

DEPTH = 3


def _config(method: str = "dpm", **cohorts: object):
    params = ({"method": "dpm", "epsilon": "1", "depth": DEPTH, "bins": 8} if method == "dpm"
              else {"method": "kmeans", "k": 2, "over": 2, "rounds": 3, "epsilon": "1"})
    return new_study_config(
        "s", [FeatureSpec(name=f"x{i}", lo=0.0, hi=1.0) for i in range(5)],
        privacy=PrivacyParams(epsilon_lsh="0.5"), n_tables=2,
        cohorts=CohortParams(**{**params, **cohorts}))


def _data() -> np.ndarray:
    rng = np.random.default_rng(8)
    return np.clip(np.vstack([rng.normal(c, 0.03, (300, 5)) for c in (0.2, 0.8)]), 0, 1)


def _rounds(config) -> list[CohortState]:
    """Every round's state of a run grown noise-free on the same data (the levels, then the
    leaf round; or the k-means rounds)."""
    protocol, X = protocol_of(config), _data()
    state, states = protocol.start(), []
    while not protocol.finished(state):
        states.append(state)
        state = protocol.advance(state, [protocol.exact(state, X)])
    return states


def _forged(level: int, done: int = 0) -> CohortState:
    start = protocol_of(_config()).start()
    data = copy.deepcopy(start.data)
    data["tree"]["level"] = level
    return CohortState(done, data)


FORGED = {
    "level -2": _forged(-2),
    "level -1": _forged(-1),
    "level L": _forged(DEPTH),
    "level L at round L + 1": _forged(DEPTH, DEPTH),
    "a huge level": _forged(2**40),
    "level 1 in round 1": _forged(1),
    "an unknown phase": CohortState(0, {**_forged(0).data, "phase": "both"}),
}


@pytest.mark.parametrize("dims", [2, None], ids=["fewer node dims than features", "all"])
@pytest.mark.parametrize("name", sorted(FORGED))
def test_a_level_outside_the_plan_is_refused(name: str, dims: int | None) -> None:
    config = _config(dims_per_node=dims)
    with pytest.raises(ConfigError, match="not one the signed config allows"):
        part._check_round(config, protocol_of(config), FORGED[name], PrivacyBudget.zero())


class _Unread:
    def __iter__(self):
        raise AssertionError("the data was read")


@pytest.mark.parametrize("name", sorted(FORGED))
def test_nothing_is_charged_read_or_drawn_for_a_forged_level(name, tmp_path,
                                                             monkeypatch) -> None:
    def no_noise(*_: object) -> None:
        raise AssertionError("noise was drawn")

    monkeypatch.setattr("common.noise.laplace.add_discrete_laplace", no_noise)
    config = _config(dims_per_node=2)
    agent = Agent(tmp_path / "state")
    enrolment = Enrolment("http://coord.test", "tok", "fp", epsilon_cap="10",
                          max_release_epsilon="1")
    path = tmp_path / "round-1.json"
    with pytest.raises(ConfigError, match="not one the signed config allows"):
        part._draw(agent, config, protocol_of(config), 1, FORGED[name], _Unread(),
                   DataOptions(), enrolment, path, None)  # type: ignore[arg-type]
    assert not path.exists()
    with agent.ledger() as ledger:
        assert ledger.entries() == [] and ledger.spent() == PrivacyBudget.zero()


CASES = {
    "dpm laplace": _config(dims_per_node=2),
    "dpm gaussian leaves": _config(dims_per_node=2, leaf_noise="gaussian", declared_n=10_000),
    "kmeans laplace": _config("kmeans"),
    "kmeans gaussian sums": _config("kmeans", sum_noise="gaussian", declared_n=10_000),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_cost_is_what_the_privacy_map_says_the_noise_costs(case: str) -> None:
    """At every valid round: the cost is the sum of the parts' budgets, and each part's
    OpenDP measurement (the one that draws its noise) maps its sensitivity to at most its
    epsilon, and not less than it (to 1e-6): neither an under- nor an overcharge."""
    config = CASES[case]
    protocol = protocol_of(config)
    states = _rounds(config)
    assert len(states) >= 2
    total = PrivacyBudget.zero()
    for state in states:
        mech = protocol.mechanism(state)
        assert protocol.cost(state) == mech.cost
        assert mech.cost == sum((p.cost for p in mech.parts), PrivacyBudget.zero())
        for p in mech.parts:
            measured = p.measured_epsilon()
            assert p.epsilon * Decimal("0.999999") <= measured <= p.epsilon, (p.name, measured)
        total += mech.cost
    assert total.epsilon <= config.cohorts.epsilon


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_ledger_charges_exactly_what_the_noise_was_calibrated_for(case, tmp_path,
                                                                      monkeypatch) -> None:
    """Through the participant's own draw at every valid round: the (epsilon, delta) each
    noise call was calibrated for adds up to the ledger's charge for that round."""
    from common.noise import gaussian
    from common.noise.laplace import add_discrete_laplace

    calls: list[PrivacyBudget] = []

    def laplace(values, sensitivity, epsilon):
        calls.append(PrivacyBudget(epsilon))
        return add_discrete_laplace(values, sensitivity, epsilon)

    real_gaussian = gaussian.add_gaussian

    def gauss(values, l2, epsilon, delta):
        calls.append(PrivacyBudget(epsilon, delta))
        return real_gaussian(values, l2, epsilon, delta)

    monkeypatch.setattr("common.noise.laplace.add_discrete_laplace", laplace)
    monkeypatch.setattr(gaussian, "add_gaussian", gauss)
    monkeypatch.setattr(policy, "check_coordinator_budget", lambda *_: None)
    config = CASES[case]
    protocol = protocol_of(config)
    agent = Agent(tmp_path / "state")
    enrolment = Enrolment("http://coord.test", "tok", "fp", epsilon_cap="10", delta_cap="0.5",
                          max_release_epsilon="1")
    source = [SimpleNamespace(X=_data())]
    for state in _rounds(config):
        number = state.done + 1
        calls.clear()
        part._draw(agent, config, protocol, number, state, source, DataOptions(), enrolment,
                   tmp_path / f"round-{number}.json", None)  # type: ignore[arg-type]
        with agent.ledger() as ledger:
            (entry,) = [e for e in ledger.entries() if e.idempotency_key == f"cohort-s-{number}"]
        assert sum(calls, PrivacyBudget.zero()) == entry.cost == protocol.cost(state)


def test_a_failed_run_is_reported_with_its_reason_not_waited_for() -> None:
    from common.errors import Conflict

    doc = {"status": "failed", "history": [{"detail": "closed; the run cannot go on: why"}]}
    with pytest.raises(Conflict, match="failed and released no model: .*cannot go on: why"):
        part._refuse_failed(doc, "s")
    part._refuse_failed({**doc, "status": "running"}, "s")


def test_a_participant_past_the_record_bound_is_clipped_and_told_locally(tmp_path, caplog,
                                                                           monkeypatch) -> None:
    """With max_records 100 and 6000 records, the release is drawn from counts clipped to
    100 (the sensitivities still hold) and the participant's log says how many values were
    clipped; nothing of that is sent."""
    from common.secagg.params import AggregationParams

    monkeypatch.setattr(policy, "check_coordinator_budget", lambda *_: None)
    config = _config(dims_per_node=2).model_copy(
        update={"aggregation": AggregationParams(max_records=100)})
    protocol = protocol_of(config)
    state = protocol.start()
    X = np.tile(_data(), (10, 1))
    exact = protocol.exact(state, X)
    assert exact.max() > 1000
    agent = Agent(tmp_path / "state")
    enrolment = Enrolment("http://coord.test", "tok", "fp", epsilon_cap="10",
                          max_release_epsilon="1")
    path = tmp_path / "round-1.json"
    with caplog.at_level("WARNING", logger="fedod.participant"):
        part._draw(agent, config, protocol, 1, state, [SimpleNamespace(X=X)],
                   DataOptions(), enrolment, path, None)  # type: ignore[arg-type]
    assert f"{int((exact > 100).sum())} value(s) were clipped" in caplog.text
    sent = np.array(json.loads(path.read_text())["values"])
    protocol.bounds(state).check(sent)  # the coordinator accepts it; unclipped, it would not
    with pytest.raises(ReleaseOutOfBounds, match="public bound"):
        protocol.bounds(state).check(exact)
