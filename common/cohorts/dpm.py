"""Federated DPM cohort tree: noisy per-feature histograms, public splits, noisy leaf profiles.

After Liebenow, Schütt et al., "DPM: Clustering Sensitive Data through Separation"
(arXiv:2307.02969): split the data recursively at low-density gaps near the centre of a
feature, then release each leaf's noisy size and centre. Here every step is a pure round
function so the coordinator can run it over many participants:

1. ``level_statistics`` (participant, exact, private): for each active leaf of the public
   :class:`~common.cohorts.dpm_plan.TreeState` and each of its ``m`` seed-chosen features,
   the histogram of the leaf's clipped records over the public intervals of its support.
2. ``release_level`` (participant): discrete Laplace noise, scale ``m / eps_level``.
3. ``advance`` (coordinator, post-processing of the summed noisy histograms): per leaf, an
   interval is *occupied* when its summed count exceeds the public noise floor; the split is
   the middle of an empty run between occupied intervals that leaves the largest mass on its
   smaller side (the most central gap), if that side holds at least twice the floor
   (and ``min_size``); otherwise the leaf is final, or, when only ``m < d`` features were
   histogrammed and some interval is occupied, tried again on other features at the next
   level. Supports shrink to the occupied span.
4. After ``depth`` levels: ``leaf_statistics`` / ``release_leaves`` (each leaf's count, and
   its histogram on every feature over its support), then ``finish`` (coordinator): the
   centre is the noisy-histogram mean over the occupied span of each feature.

Changed from the paper
----------------------
- The paper selects each split with the exponential mechanism over one curator's records.
  Federated, nobody holds every record, so the split is computed by post-processing the
  *sum* of the participants' noisy histograms (no extra privacy cost beyond the histograms).
- The paper's interval size is a data-dependent statistic whose add/remove sensitivity is
  larger than its Lemma 1 states; here the interval width is public,
  ``(hi_j - lo_j) / bins``, from the schema's box, and that statistic is not computed at all.
- Its code takes the bounds from the data's min/max; here only the public box is used, and
  supports shrink only on released (noisy) values.
- Leaf centres come from noisy per-feature histograms rather than noisy sums: a sum's
  sensitivity is the box's half-width per feature, the histogram's is one count per feature.

Sensitivity (add/remove one record)
-----------------------------------
The leaves of one level partition the box, so a record lies in exactly one leaf and, per
histogrammed feature, in exactly one interval (records are clipped into the support first):
one level's histograms change by at most ``m`` in L1 (``m = plan.dims_per_node``). Leaf
counts: 1. Leaf histograms (all ``d`` features): ``d`` in L1, ``sqrt(d)`` in L2 (what the
optional Gaussian leaf noise pays for, :mod:`common.noise.gaussian`). Levels and the leaf
release compose sequentially (:meth:`~common.cohorts.dpm_plan.DPMPlan.budgets`); within a
level, leaves are disjoint (parallel composition). Substitution neighbours would double every
sensitivity.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from common.cohorts.dpm_plan import DPMPlan, Leaf, TreeState, node_dims, tree_state
from common.cohorts.mechanism import dpm_leaves, dpm_level
from common.cohorts.model import CohortModel, Condition

__all__ = ["LeafStatistics", "advance", "choose_split", "finish", "fit_federated",
           "leaf_statistics", "level_statistics", "release_leaves", "release_level"]

Ints = NDArray[np.int64]
Floats = NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class LeafStatistics:
    """Per leaf (every leaf, in state order): its count, and its histograms on every feature
    over the leaf's support, concatenated leaf by leaf, feature by feature."""

    counts: Ints
    histograms: Ints

    def __add__(self, other: LeafStatistics) -> LeafStatistics:
        return LeafStatistics(self.counts + other.counts, self.histograms + other.histograms)


def _intervals(X: ArrayLike, plan: DPMPlan) -> NDArray[np.intp]:
    """Each clipped record's public interval index per feature."""
    x = np.asarray(X, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != plan.d:
        raise ValueError(f"X must have {plan.d} columns, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("X must be finite (impute missing values first)")
    idx = np.floor((np.clip(x, plan.lo, plan.hi) - plan.lo) / plan.width)
    return np.clip(idx, 0, plan.bins - 1).astype(np.intp)


def _members(idx: NDArray[np.intp], leaf: Leaf) -> NDArray[np.bool_]:
    mask = np.ones(idx.shape[0], dtype=bool)
    for feature, edge, above in leaf.conditions:
        mask &= (idx[:, feature] >= edge) == above
    return mask


def _histograms(idx: NDArray[np.intp], leaf: Leaf, dims: Sequence[int]) -> list[Ints]:
    rows = idx[_members(idx, leaf)]
    out = []
    for j in dims:
        a, b = leaf.support[j]
        out.append(np.bincount(np.clip(rows[:, j], a, b - 1) - a, minlength=b - a)
                   .astype(np.int64))
    return out


def _level_dims(state: TreeState, plan: DPMPlan) -> list[tuple[int, ...]]:
    return [node_dims(plan, state.seed, leaf.path, state.level) for leaf in state.active]


def level_statistics(X: ArrayLike, state: TreeState, plan: DPMPlan) -> Ints:
    """Exact histograms of one level (private): active leaves in order, each of its
    :func:`~common.cohorts.dpm_plan.node_dims` over its support. L1 sensitivity ``plan.m``."""
    idx = _intervals(X, plan)
    parts = [h for leaf, dims in zip(state.active, _level_dims(state, plan), strict=True)
             for h in _histograms(idx, leaf, dims)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def release_level(stats: ArrayLike, plan: DPMPlan, level: int) -> Ints:
    """Discrete Laplace (OpenDP) of scale ``plan.m / eps_level`` on every interval; noise and
    cost from one lookup (:func:`common.cohorts.mechanism.dpm_level`, which refuses a level
    outside ``0 .. depth - 1``)."""
    exact = np.asarray(stats, dtype=np.int64)
    return dpm_level(plan, level, exact.size).release(exact)


def choose_split(hists: Sequence[ArrayLike], dims: Sequence[int], starts: Sequence[int],
                 floor: float, min_side: float) -> tuple[int, int] | None:
    """The most central low-density gap, from summed noisy histograms (post-processing).

    For each feature, intervals above ``floor`` are occupied; each run of unoccupied
    intervals between two occupied ones is a gap, cut at its middle edge. The cut with the
    largest occupied mass on its smaller side wins (ties: the wider gap, then the lower
    feature); it must leave at least ``min_side`` on each side. Returns ``(feature, edge)``
    with ``edge`` an absolute interval index, or ``None``.
    """
    best: tuple[float, int, int, int] | None = None
    for h_raw, j, a in zip(hists, dims, starts, strict=True):
        h = np.asarray(h_raw, dtype=np.float64)
        occ = np.flatnonzero(h > floor)
        if occ.size < 2:
            continue
        mass = np.cumsum(np.where(h > floor, h, 0.0))
        for left, right in zip(occ[:-1], occ[1:], strict=True):
            if right - left < 2:
                continue
            edge = int(left + 1 + (right - left - 1) // 2)
            side = min(float(mass[left]), float(mass[-1] - mass[left]))
            key = (side, int(right - left - 1), -j, a + edge)
            if side >= min_side and (best is None or key[:3] > best[:3]):
                best = key
    return None if best is None else (-best[2], best[3])


def _shrink(support: tuple[tuple[int, int], ...], hists: Sequence[Floats],
            dims: Sequence[int], floor: float) -> tuple[tuple[int, int], ...]:
    out = list(support)
    for h, j in zip(hists, dims, strict=True):
        occ = np.flatnonzero(h > floor)
        if occ.size:
            a, b = support[j]
            out[j] = (max(a, a + int(occ[0]) - 1), min(b, a + int(occ[-1]) + 2))
    return tuple(out)


def advance(state: TreeState, summed: ArrayLike, plan: DPMPlan) -> TreeState:
    """Coordinator: split every active leaf on the summed noisy histograms of its level."""
    flat = np.asarray(summed, dtype=np.float64)
    eps = plan.budgets().levels[state.level]
    floor = plan.floor(plan.m, eps)
    min_side = max(float(plan.min_size), 2.0 * floor)
    grow = state.level + 1 < plan.depth
    leaves: list[Leaf] = []
    offset = 0
    dims_iter = iter(_level_dims(state, plan))
    for leaf in state.leaves:
        if not leaf.active:
            leaves.append(leaf)
            continue
        dims = next(dims_iter)
        hists = []
        for j in dims:
            a, b = leaf.support[j]
            hists.append(flat[offset:offset + b - a])
            offset += b - a
        support = _shrink(leaf.support, hists, dims, floor)
        split = choose_split(hists, dims, [leaf.support[j][0] for j in dims], floor, min_side)
        if split is None:  # retry on other features next level, unless all were seen
            occupied = any(np.any(h > floor) for h in hists)
            leaves.append(replace(leaf, support=support,
                                  active=grow and occupied and plan.m < plan.d))
            continue
        feature, edge = split
        a, b = support[feature]
        for above, part in ((False, (a, edge)), (True, (edge, b))):
            child = support[:feature] + (part,) + support[feature + 1:]
            leaves.append(Leaf(leaf.path + ("1" if above else "0"),
                               leaf.conditions + ((feature, edge, above),), child, grow))
    if offset != flat.size:
        raise ValueError(f"summed histograms have {flat.size} values, the level has {offset}")
    return TreeState(state.seed, state.level + 1, tuple(leaves))


def leaf_statistics(X: ArrayLike, state: TreeState, plan: DPMPlan) -> LeafStatistics:
    """Exact leaf release (private): each leaf's count (sensitivity 1) and its histograms on
    all ``d`` features over its support (L1 sensitivity ``d``)."""
    idx = _intervals(X, plan)
    counts = np.array([_members(idx, leaf).sum() for leaf in state.leaves], dtype=np.int64)
    hists = [h for leaf in state.leaves for h in _histograms(idx, leaf, range(plan.d))]
    return LeafStatistics(counts, np.concatenate(hists).astype(np.int64))


def release_leaves(stats: LeafStatistics, plan: DPMPlan) -> LeafStatistics:
    """OpenDP noise: counts discrete Laplace at scale ``1 / eps_counts``; histograms discrete
    Laplace at ``d / eps_histograms`` or, with ``plan.leaf_noise == "gaussian"``, the
    discrete Gaussian at L2 sensitivity ``sqrt(d)`` for ``(eps_histograms, leaf_delta)``
    (:func:`common.cohorts.mechanism.dpm_leaves`)."""
    counts = np.asarray(stats.counts, dtype=np.int64)
    hists = np.asarray(stats.histograms, dtype=np.int64)
    mech = dpm_leaves(plan, counts.size, hists.size)
    noisy_counts, noisy_hists = mech.split(mech.release(np.concatenate([counts, hists])))
    return LeafStatistics(noisy_counts, noisy_hists)


def _centre(h: Floats, a: int, j: int, plan: DPMPlan, floor: float) -> float:
    """Histogram mean over the run of occupied intervals around the fullest one, one
    interval either side (noise elsewhere would pull the mean to the support's middle)."""
    mids = plan.lo[j] + (a + np.arange(h.size) + 0.5) * plan.width[j]
    top = int(np.argmax(h))
    if h[top] <= floor:
        return float(mids.mean())
    lo_i, hi_i = top, top + 1
    while lo_i > 0 and h[lo_i - 1] > floor:
        lo_i -= 1
    while hi_i < h.size and h[hi_i] > floor:
        hi_i += 1
    lo_i, hi_i = max(0, lo_i - 1), min(h.size, hi_i + 1)
    w = np.clip(h[lo_i:hi_i], 0.0, None)
    return float((w * mids[lo_i:hi_i]).sum() / w.sum())


def finish(state: TreeState, summed: LeafStatistics, plan: DPMPlan) -> CohortModel:
    """Coordinator: the cohort model from the summed noisy leaf release (post-processing).

    Leaves whose summed noisy count is at or under the count floor (and ``min_size``) are
    dropped, keeping at least the largest; rules are the leaves' conditions in feature units.
    """
    budget = plan.budgets()
    h_floor = plan.histogram_floor()
    c_floor = max(plan.floor(1, budget.leaf_counts), float(plan.min_size))
    flat = np.asarray(summed.histograms, dtype=np.float64)
    counts = np.asarray(summed.counts, dtype=np.float64)
    centres, offset = [], 0
    for leaf in state.leaves:
        row = []
        for j, (a, b) in enumerate(leaf.support):
            row.append(_centre(flat[offset:offset + b - a], a, j, plan, h_floor))
            offset += b - a
        centres.append(row)
    if offset != flat.size or counts.size != len(state.leaves):
        raise ValueError("summed leaf release does not match the tree state")
    keep = [i for i in range(counts.size) if counts[i] > c_floor] or [int(np.argmax(counts))]
    rules = tuple(tuple(Condition(f, float(plan.lo[f] + e * plan.width[f]), above)
                        for f, e, above in state.leaves[i].conditions) for i in keep)
    return CohortModel(np.array(centres)[keep], counts[keep], plan.lo, plan.hi, rules)


def fit_federated(parts: Sequence[ArrayLike], plan: DPMPlan, seed: bytes,
                  noise: Literal["each", "sum"] = "each") -> CohortModel:
    """Simulate a study in one process over ``parts`` (one array per participant).

    ``noise="each"``: every participant noises its own statistics (``plan.participants``
    should be ``len(parts)``). ``noise="sum"``: the exact statistics are summed and noised
    once, as secure aggregation would give (``plan.participants`` should be 1).
    """
    state = tree_state(plan, seed)
    while not state.finished(plan):
        stats = [level_statistics(x, state, plan) for x in parts]
        if noise == "sum":
            summed = release_level(np.sum(stats, axis=0), plan, state.level)
        else:
            summed = np.sum([release_level(s, plan, state.level) for s in stats], axis=0)
        state = advance(state, summed, plan)
    state = state.close()
    leaf_stats = [leaf_statistics(x, state, plan) for x in parts]
    if noise == "sum":
        total = leaf_stats[0]
        for s in leaf_stats[1:]:
            total = total + s
        return finish(state, release_leaves(total, plan), plan)
    released = [release_leaves(s, plan) for s in leaf_stats]
    total = released[0]
    for r in released[1:]:
        total = total + r
    return finish(state, total, plan)
