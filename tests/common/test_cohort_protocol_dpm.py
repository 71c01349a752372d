"""The DPM cohort tree as a round protocol (common.cohorts.dpm_protocol): the same tree as
the pure functions, exact costs, the release scales of each round, the state's JSON."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import numpy as np
import pytest

from common.budget import PrivacyBudget
from common.cohorts import dpm
from common.cohorts.dpm_plan import tree_state
from common.cohorts.dpm_protocol import DPMProtocol
from common.cohorts.params import CohortParams
from common.cohorts.protocol import CohortState
from common.cohorts.study import protocol_for
from common.errors import ReleaseOutOfBounds
from common.noise.laplace import add_discrete_laplace

LO, HI = [0.0, 0.0, 0.0], [10.0, 10.0, 10.0]
PARAMS = CohortParams(method="dpm", epsilon="2", depth=3, bins=16, dims_per_node=2)
SEED = b"study-seed-dpm"


def _protocol(params: CohortParams = PARAMS) -> DPMProtocol:
    proto = protocol_for(params, LO, HI, SEED)
    assert isinstance(proto, DPMProtocol)
    return proto


def _parts() -> list[np.ndarray]:
    rng = np.random.default_rng(4)
    blobs = [np.array([2.0, 2.0, 2.0]), np.array([8.0, 8.0, 2.0]), np.array([2.0, 8.0, 8.0])]
    return [np.vstack([c + rng.normal(0, 0.3, (150, 3)) for c in blobs]) for _ in range(2)]


def _run(proto: DPMProtocol, parts) -> tuple[CohortState, list[PrivacyBudget]]:
    state, costs = proto.start(), []
    while not proto.finished(state):
        costs.append(proto.cost(state))
        vectors = [proto.exact(state, X) for X in parts]  # noise-free: exact arithmetic
        assert all(v.shape == (proto.size(state),) for v in vectors)
        state = CohortState.from_json(proto.advance(state, vectors).to_json())
    return state, costs


def test_the_protocol_grows_the_tree_the_pure_functions_grow() -> None:
    proto, parts = _protocol(), _parts()
    state, costs = _run(proto, parts)
    plan = replace(proto.plan, participants=2)
    tree = tree_state(plan, SEED)
    while not tree.finished(plan):
        tree = dpm.advance(tree, sum(dpm.level_statistics(X, tree, plan) for X in parts), plan)
    tree = tree.close()
    total = dpm.leaf_statistics(parts[0], tree, plan) + dpm.leaf_statistics(parts[1], tree, plan)
    expected = dpm.finish(tree, total, plan)
    model = proto.finish(state)
    np.testing.assert_array_equal(model.centroids, expected.centroids)
    np.testing.assert_array_equal(model.masses, expected.masses)
    assert model.rules == expected.rules and model.k >= 3
    assert len(costs) == state.done <= proto.rounds


def test_each_round_costs_its_part_and_a_full_tree_spends_epsilon_exactly() -> None:
    proto = _protocol()
    state, costs = _run(proto, _parts())
    budget = proto.plan.budgets()
    levels = len(costs) - 1
    assert costs[:-1] == [PrivacyBudget(e) for e in budget.levels[:levels]]
    assert costs[-1] == PrivacyBudget(budget.leaf_counts + budget.leaf_histograms)
    spent = sum((c.epsilon for c in costs), Decimal(0))
    assert spent <= PARAMS.epsilon
    if levels == PARAMS.depth:
        assert spent == PARAMS.epsilon


def test_release_noises_each_round_at_its_stated_sensitivity(monkeypatch) -> None:
    proto, calls = _protocol(), []

    def spy(values, sensitivity, epsilon):
        calls.append((sensitivity, epsilon))
        return add_discrete_laplace(values, sensitivity, epsilon)

    monkeypatch.setattr("common.noise.laplace.add_discrete_laplace", spy)
    X = _parts()[0]
    state = proto.start()
    noisy = proto.release(proto.exact(state, X), state)
    budget = proto.plan.budgets()
    assert calls == [(2, budget.levels[0])] and noisy.shape == (proto.size(state),)
    while state.data["phase"] == "levels":
        state = proto.advance(state, [proto.exact(state, X)])
    calls.clear()
    proto.release(proto.exact(state, X), state)
    assert calls == [(1, budget.leaf_counts), (3, budget.leaf_histograms)]


def test_wrong_lengths_are_refused() -> None:
    proto = _protocol()
    with pytest.raises(ReleaseOutOfBounds, match="values"):
        proto.advance(proto.start(), [np.zeros(3, dtype=np.int64)])


def test_dims_per_node_above_d_means_every_feature() -> None:
    proto = _protocol(CohortParams(method="dpm", epsilon="2", depth=2, dims_per_node=50))
    assert proto.plan.m == 3


def _moved(leaf: dict, feature: int = 0, edge: int = 0) -> dict:
    """The leaf with its split condition moved (to another feature and/or edge)."""
    f, e, above = leaf["conditions"][0]
    return {**leaf, "conditions": [[(f + feature) % 3, (e + edge - 1) % 15 + 1, above]]}


def _with_leaves(state: CohortState, leaves: list[dict]) -> CohortState:
    return CohortState(state.done, {**state.data, "tree": {**state.data["tree"],
                                                          "leaves": leaves}})


@pytest.mark.parametrize("mutate", [
    lambda ls: ls + [ls[0]],  # a leaf twice: its records would count twice
    lambda ls: ls[:1],  # half the box missing
    lambda ls: [ls[0], _moved(ls[1], feature=1)],  # siblings split on other features
    lambda ls: [ls[0], _moved(ls[1], edge=1)],  # siblings split at other edges
    lambda ls: [{**ls[0], "path": ""}, ls[1]],  # the root beside a child
])
def test_a_tree_whose_leaves_overlap_or_leave_gaps_is_refused(mutate) -> None:
    """A coordinator cannot make a record count in two leaves (double sensitivity)."""
    proto = _protocol()
    X = _parts()[0]
    state = proto.start()
    while len(state.data["tree"]["leaves"]) < 2:
        state = proto.advance(state, [proto.exact(state, X)])
    leaves = state.data["tree"]["leaves"][:2]
    good = _with_leaves(state, leaves) if len(state.data["tree"]["leaves"]) == 2 else None
    if good is not None:
        proto.exact(good, X[:0])  # the real tree passes
    with pytest.raises(ValueError):
        proto.exact(_with_leaves(state, mutate(leaves)), X[:0])
