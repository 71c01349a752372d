"""The federated DPM cohort tree as a cohort round protocol (method ``dpm``).

Rounds: one per tree level while a leaf is active (at most ``depth``), then the leaf round.
A level's vector is :func:`common.cohorts.dpm.level_statistics` (histograms of each active
leaf on its seed-chosen features; L1 sensitivity ``m``, noise scale ``m / eps_level``); the
leaf round's vector is ``[leaf counts, leaf histograms on all d features]`` (sensitivities 1
and ``d``, scales ``1 / eps_counts`` and ``d / eps_histograms``), both noised by
:mod:`common.cohorts.dpm` with OpenDP. The coordinator's split and leaf profiles are
post-processing of the summed noisy vectors. A tree that stops early runs fewer rounds and
each participant spends less than the study's cohort epsilon: every round is charged exactly
what it releases (:meth:`DPMProtocol.cost`).

The level a round noises and charges comes from the public state, so it is checked against
the plan first (:meth:`DPMProtocol.mechanism`: a level in ``0 .. depth - 1`` equal to the
round index, a known phase); noise and cost are then read from the one
:class:`~common.cohorts.mechanism.RoundMechanism` of that level.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from common.budget import PrivacyBudget
from common.cohorts import dpm
from common.cohorts.bounds import ReleaseBounds, checked_sum, release_bounds
from common.cohorts.dpm_plan import DPMPlan, TreeState, node_dims, tree_state
from common.cohorts.mechanism import DEFAULT_MAX_RECORDS, RoundMechanism, dpm_leaves, dpm_level
from common.cohorts.model import CohortModel
from common.cohorts.protocol import CohortState

__all__ = ["DPMProtocol"]

Ints = NDArray[np.int64]


def check_partition(tree: TreeState, plan: DPMPlan) -> None:
    """Refuse a tree whose leaves do not partition the box (``ValueError``).

    The sensitivities (``m`` per level, 1 and ``d`` for the leaves) hold only when every
    record lies in exactly one leaf; a coordinator could otherwise send overlapping leaves
    and count a record twice. Checked on the public state alone: leaf paths are distinct and
    prefix-free with ``sum 2**-len(path) == 1`` (a full binary tree), each leaf has one
    condition per path bit with ``above`` equal to the bit, and two leaves that part at bit
    ``i`` share their first ``i`` conditions and split on the same feature and edge.
    """
    leaves = tree.leaves
    split: dict[str, tuple[object, int, int]] = {}
    paths = [leaf.path for leaf in leaves]
    if (not leaves or len(leaves) > 2**plan.depth or len(set(paths)) != len(paths)
            or any(set(p) - {"0", "1"} or len(p) > plan.depth for p in paths)
            or sum(2.0 ** -len(p) for p in paths) != 1.0):
        raise ValueError("the tree's leaves do not form a full binary tree")
    for leaf in leaves:
        if len(leaf.conditions) != len(leaf.path):
            raise ValueError(f"leaf {leaf.path!r} has {len(leaf.conditions)} conditions")
        for i, (feature, edge, above) in enumerate(leaf.conditions):
            if above != (leaf.path[i] == "1") or not (0 <= feature < plan.d
                                                      and 0 < edge < plan.bins):
                raise ValueError(f"leaf {leaf.path!r}: condition {i} does not match its path")
            node = (leaf.path[:i], tuple(leaf.conditions[:i]))
            if split.setdefault(leaf.path[:i], (node, feature, edge)) != (node, feature, edge):
                raise ValueError(f"leaves under node {leaf.path[:i]!r} split differently")
    for p in paths:
        if any(q != p and q.startswith(p) for q in paths):
            raise ValueError(f"leaf {p!r} is a prefix of another leaf")


class DPMProtocol:
    """State data: ``tree`` (the public :class:`TreeState`), ``phase`` (``levels``, ``leaves``
    or ``done``) and, when done, ``summed`` (the summed noisy leaf release)."""

    def __init__(self, plan: DPMPlan, seed: bytes, max_records: int = DEFAULT_MAX_RECORDS
                 ) -> None:
        self.plan, self.seed, self.max_records = plan, seed, max_records
        self.rounds = plan.depth + 1

    def _state(self, done: int, tree: TreeState, participants: int,
               summed: list[int] | None = None) -> CohortState:
        phase = "levels"
        if summed is not None:
            phase = "done"
        elif tree.finished(self.plan):
            phase, tree = "leaves", tree.close()
        data: dict[str, Any] = {"tree": json.loads(tree.to_json()), "phase": phase}
        if summed is not None:
            data["summed"] = summed
        return CohortState(done, data, participants)

    def _tree(self, state: CohortState) -> TreeState:
        """The state's tree, refused (``ValueError``) unless it partitions the box and its
        level is one the plan has: ``0 .. depth - 1`` while levels run, at most ``depth``
        after, and always the round index (one level per round, in order; the leaf round
        keeps the level)."""
        phase = state.data.get("phase")
        if phase not in ("levels", "leaves", "done"):
            raise ValueError(f"unknown DPM phase {phase!r}")
        tree = TreeState.from_json(json.dumps(state.data["tree"]))
        top = self.plan.depth - 1 if phase == "levels" else self.plan.depth
        if not 0 <= tree.level <= top:
            raise ValueError(f"DPM level {tree.level} is outside the public plan (0 to {top})")
        if tree.level != state.done - (phase == "done"):  # the leaf round keeps the level
            raise ValueError(f"DPM level {tree.level} does not match round {state.done + 1}")
        check_partition(tree, self.plan)
        return tree

    def start(self) -> CohortState:
        return self._state(0, tree_state(self.plan, self.seed), 0)

    def size(self, state: CohortState) -> int:
        tree, plan = self._tree(state), self.plan
        if state.data["phase"] == "levels":
            return sum(leaf.support[j][1] - leaf.support[j][0] for leaf in tree.active
                       for j in node_dims(plan, tree.seed, leaf.path, tree.level))
        return len(tree.leaves) + sum(b - a for leaf in tree.leaves for a, b in leaf.support)

    def mechanism(self, state: CohortState) -> RoundMechanism:
        tree, size = self._tree(state), self.size(state)
        if state.data["phase"] == "levels":
            return dpm_level(self.plan, tree.level, size, self.max_records)
        if state.data["phase"] == "done":
            raise ValueError("the DPM tree is done: no round is left")
        return dpm_leaves(self.plan, len(tree.leaves), size - len(tree.leaves), self.max_records)

    def bounds(self, state: CohortState) -> ReleaseBounds:
        return release_bounds(self.mechanism(state))

    def cost(self, state: CohortState) -> PrivacyBudget:
        return self.mechanism(state).cost

    def exact(self, state: CohortState, X: ArrayLike) -> Ints:
        tree = self._tree(state)
        if state.data["phase"] == "levels":
            return dpm.level_statistics(X, tree, self.plan)
        stats = dpm.leaf_statistics(X, tree, self.plan)
        return np.concatenate([stats.counts, stats.histograms]).astype(np.int64)

    def _leaf_split(self, state: CohortState, vector: ArrayLike) -> dpm.LeafStatistics:
        v = np.asarray(vector, dtype=np.int64)
        if v.shape != (self.size(state),):
            raise ValueError(f"the leaf round takes {self.size(state)} values, got {v.shape}")
        n = len(self._tree(state).leaves)
        return dpm.LeafStatistics(v[:n], v[n:])

    def release(self, exact: Ints, state: CohortState) -> Ints:
        return self.mechanism(state).release(exact)

    def advance(self, state: CohortState, releases: Sequence[Ints]) -> CohortState:
        summed = checked_sum(releases, self.bounds(state))
        if state.data["phase"] == "leaves":
            return self._state(state.done + 1, self._tree(state), len(releases),
                               [int(v) for v in summed])
        plan = replace(self.plan, participants=len(releases))
        return self._state(state.done + 1, dpm.advance(self._tree(state), summed, plan),
                           len(releases))

    def skip(self, state: CohortState) -> CohortState | None:
        """A level that could not be used splits nothing: the tree moves to the next level
        unchanged. The leaf round cannot be skipped (no model without it): None."""
        tree = self._tree(state)
        if state.data["phase"] != "levels":
            return None
        return self._state(state.done + 1, replace(tree, level=tree.level + 1),
                           state.participants)

    def finished(self, state: CohortState) -> bool:
        return bool(state.data["phase"] == "done")

    def finish(self, state: CohortState) -> CohortModel:
        plan = replace(self.plan, participants=max(1, state.participants))
        tree = self._tree(state)
        leaf_round = replace(state, done=state.done - 1, data={**state.data, "phase": "leaves"})
        summed = self._leaf_split(leaf_round, state.data["summed"])
        return dpm.finish(tree, summed, plan)
