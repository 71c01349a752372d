"""Federated differentially private k-means with cluster fusion (DP-KCCM), as pure functions.

After Ni et al., "Enhancing Privacy in K-Means Clustering Through Cluster Fusion"
(Neurocomputing 2021): start from ``n * k`` centroids, run ``T`` private Lloyd rounds on
noisy per-cluster sums and counts, then merge the closest centroids, weighted by their noisy
counts, down to ``k``. Here every round is federated: each participant releases its own
noisy statistics (:func:`release_round`) and the coordinator sums them
(:func:`update_centroids`). Fusion (:func:`fuse_centroids`) reads released values only and
is post-processing: it costs nothing.

Changed from the paper
----------------------
The paper initialises from the data, which leaks. :func:`initial_centroids` draws uniform
points in the public box ``[lo, hi]`` from the public study seed (SHA-256 counter mode, the
stream of :mod:`common.hashing` under its own key); it never reads data or numpy's samplers.

Sensitivity (add/remove one record)
-----------------------------------
A participant clips each record to ``[lo, hi]`` and assigns it to its nearest centroid.
Adding or removing one record changes one cluster's count by 1 (L1 sensitivity of the count
vector: 1) and one cluster's sum vector by the record itself, so the sums change by at most
``sum_j max(|lo_j|, |hi_j|)`` in L1 over all clusters and coordinates. Sums are released on
a public fixed-point grid of step ``step = max_j max(|lo_j|, |hi_j|) / 2**resolution_bits``:
each clipped coordinate is rounded to ``rint(x_j / step)`` *before* summing, so a record moves
the integer sums by at most ``S = sum_j max(|rint(lo_j/step)|, |rint(hi_j/step)|)`` in L1
(rounding is monotone, so this bound is exact, not approximate).

Noise, from OpenDP only (:func:`common.release.add_discrete_laplace`)
--------------------------------------------------------------------
Counts: discrete Laplace of scale ``1 / eps_counts`` on every cluster. Sums: integer discrete
Laplace of scale ``S / eps_sums`` on every cluster and coordinate, in grid units. One round
costs ``eps_counts + eps_sums`` (basic composition). :func:`split_epsilon` splits a total
budget evenly over ``T`` rounds (exact in 1e-9 units; the first rounds take the remainder)
and each round between counts and sums by the public ``count_share``.
Substitution neighbours (replace one record) would double both sensitivities.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from common.budget import EPSILON_QUANTUM, PrivacyBudget
from common.hashing import _as_bounds, _Sha256Stream
from common.release import add_discrete_laplace

__all__ = [
    "KMeansPlan",
    "RoundRelease",
    "RoundStatistics",
    "fit_federated",
    "fuse_centroids",
    "initial_centroids",
    "release_round",
    "round_statistics",
    "split_epsilon",
    "update_centroids",
]

_INIT_TAG = b"fedod-kmeans-init/1\x00"
Floats = NDArray[np.float64]
Ints = NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class KMeansPlan:
    """The public parameters of one private k-means study (all of them signed config).

    Attributes
    ----------
    lo, hi : (d,) float64
        The public box; records are clipped to it.
    k : int
        Clusters wanted after fusion.
    over : int, default 3
        Fusion factor ``n``: start from ``n * k`` centroids (1: no fusion).
    rounds : int, default 5
        Lloyd rounds ``T``.
    epsilon : Decimal | int | str
        Each participant's total epsilon over the ``T`` rounds.
    count_share : Decimal | str, default "0.2"
        Fraction of each round's epsilon spent on the counts; the rest goes to the sums.
    resolution_bits : int, default 12
        Fixed-point grid of the sums: ``step = max_j max(|lo_j|, |hi_j|) / 2**bits``.
    """

    lo: Floats
    hi: Floats
    k: int
    epsilon: Decimal | int | str
    over: int = 3
    rounds: int = 5
    count_share: Decimal | str = "0.2"
    resolution_bits: int = 12

    def __post_init__(self) -> None:
        lo, hi = _as_bounds(self.lo, self.hi)
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)
        for name, low, high in (("k", 1, 10_000), ("over", 1, 100), ("rounds", 1, 1000),
                                ("resolution_bits", 1, 30)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
        split_epsilon(self.epsilon, self.rounds, self.count_share)

    @property
    def n_centroids(self) -> int:
        """Centroids during the Lloyd rounds: ``over * k``."""
        return self.over * self.k

    @property
    def step(self) -> float:
        """Public fixed-point step of the released sums."""
        bound = float(np.max(np.maximum(np.abs(self.lo), np.abs(self.hi))))
        return (bound if bound > 0 else 1.0) / 2.0**self.resolution_bits

    @property
    def sum_sensitivity(self) -> int:
        """``S``: L1 change of the integer sums when one record is added or removed."""
        lo_u, hi_u = np.rint(self.lo / self.step), np.rint(self.hi / self.step)
        return max(1, int(np.sum(np.maximum(np.abs(lo_u), np.abs(hi_u)))))

    def budgets(self) -> tuple[tuple[Decimal, Decimal], ...]:
        """Per round ``(eps_counts, eps_sums)``; see :func:`split_epsilon`."""
        return split_epsilon(self.epsilon, self.rounds, self.count_share)


def split_epsilon(epsilon: Decimal | int | str, rounds: int,
                  count_share: Decimal | str = "0.2") -> tuple[tuple[Decimal, Decimal], ...]:
    """Split ``epsilon`` evenly over ``rounds``, each between counts and sums.

    Exact in 1e-9 units: the rounds' totals sum to ``epsilon`` exactly (the first
    ``units % rounds`` rounds take one unit more) and ``eps_counts`` is
    ``floor(round * count_share)`` units. Raises ``ValueError`` if any part would be zero.
    """
    total = PrivacyBudget(epsilon).epsilon
    share = Decimal(str(count_share))
    if not share.is_finite() or not 0 < share < 1:
        raise ValueError(f"count_share must be in (0, 1), got {count_share!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive integer, got {rounds!r}")
    units = int(total / EPSILON_QUANTUM)
    out = []
    for r in range(rounds):
        round_units = units // rounds + (1 if r < units % rounds else 0)
        count_units = int((round_units * share).to_integral_value(ROUND_FLOOR))
        if count_units < 1 or round_units - count_units < 1:
            raise ValueError(f"epsilon {total} is too small to split over {rounds} rounds")
        out.append((count_units * EPSILON_QUANTUM, (round_units - count_units) * EPSILON_QUANTUM))
    return tuple(out)


def initial_centroids(seed: bytes, n_centroids: int, lo: ArrayLike, hi: ArrayLike) -> Floats:
    """``n_centroids`` points uniform in the box ``[lo, hi]``, from the public seed only.

    Block ``t`` of the stream is ``sha256(key || t)`` with key ``"fedod-kmeans-init/1\\0" ||
    len(seed) (u32 LE) || seed || n_centroids (u32) || d (u32)``; coordinates are drawn row by
    row as ``lo_j + (hi_j - lo_j) * u``.
    """
    lo_a, hi_a = _as_bounds(lo, hi)
    if not isinstance(seed, bytes) or not seed:
        raise ValueError("seed must be non-empty bytes")
    if isinstance(n_centroids, bool) or not isinstance(n_centroids, int) or n_centroids < 1:
        raise ValueError(f"n_centroids must be a positive integer, got {n_centroids!r}")
    d = lo_a.size
    key = (_INIT_TAG + len(seed).to_bytes(4, "little") + seed
           + n_centroids.to_bytes(4, "little") + d.to_bytes(4, "little"))
    stream = _Sha256Stream(key)
    return np.array([[stream.between(float(lo_a[j]), float(hi_a[j])) for j in range(d)]
                     for _ in range(n_centroids)], dtype=np.float64)


@dataclass(frozen=True, eq=False)
class RoundStatistics:
    """One participant's exact round statistics: private, never sent.

    ``sums[c]`` is the integer grid sum of the clipped records nearest to centroid ``c``
    (units of ``plan.step``), ``counts[c]`` their number.
    """

    sums: Ints
    counts: Ints


@dataclass(frozen=True, eq=False)
class RoundRelease:
    """What a participant releases for one round: noisy sums (grid units) and counts.

    Drawn once; a retry re-sends these values. ``cost`` is what the release spends.
    """

    sums: Ints
    counts: Ints
    cost: PrivacyBudget

    def __post_init__(self) -> None:
        for name in ("sums", "counts"):
            value = np.array(getattr(self, name), dtype=np.int64)
            value.setflags(write=False)
            object.__setattr__(self, name, value)


def assign(X: ArrayLike, centroids: ArrayLike) -> NDArray[np.intp]:
    """Index of each row's nearest centroid (squared Euclidean; ties to the lower index)."""
    x, c = np.asarray(X, dtype=np.float64), np.asarray(centroids, dtype=np.float64)
    dist = (x * x).sum(1)[:, None] - 2.0 * x @ c.T + (c * c).sum(1)[None, :]
    return np.asarray(np.argmin(dist, axis=1), dtype=np.intp)


def round_statistics(X: ArrayLike, centroids: ArrayLike, plan: KMeansPlan) -> RoundStatistics:
    """Clip ``X`` to the box, assign to ``centroids``, sum grid units and count per cluster."""
    x = np.asarray(X, dtype=np.float64)
    cents = np.asarray(centroids, dtype=np.float64)
    d = plan.lo.size
    if x.ndim != 2 or x.shape[1] != d or cents.ndim != 2 or cents.shape[1] != d:
        raise ValueError(f"X and centroids must have {d} columns, got {x.shape}, {cents.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("X must be finite (impute missing values first)")
    x = np.clip(x, plan.lo, plan.hi)
    labels = assign(x, cents)
    units = np.rint(x / plan.step).astype(np.int64)
    n_c = cents.shape[0]
    counts = np.bincount(labels, minlength=n_c).astype(np.int64)
    sums = np.zeros((n_c, d), dtype=np.int64)
    if x.shape[0]:
        order = np.argsort(labels, kind="stable")
        present = np.flatnonzero(counts)
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))[present]
        sums[present] = np.add.reduceat(units[order], starts, axis=0)
    return RoundStatistics(sums=sums, counts=counts)


def release_round(stats: RoundStatistics, plan: KMeansPlan, round_index: int) -> RoundRelease:
    """Noise ``stats`` with round ``round_index``'s budget (module docstring for the scales)."""
    eps_counts, eps_sums = plan.budgets()[round_index]
    counts = add_discrete_laplace(stats.counts, 1, eps_counts)
    sums = add_discrete_laplace(stats.sums, plan.sum_sensitivity, eps_sums)
    return RoundRelease(sums=sums, counts=counts, cost=PrivacyBudget(eps_counts + eps_sums))


def count_floor(plan: KMeansPlan, round_index: int, participants: int) -> float:
    """Public floor under which a summed noisy count keeps the previous centroid:
    twice the standard deviation of the summed count noise (``sqrt(2 p) / eps_counts``),
    and at least 1."""
    eps_counts = float(plan.budgets()[round_index][0])
    return max(1.0, 2.0 * math.sqrt(2.0 * participants) / eps_counts)


def update_centroids(releases: Sequence[RoundRelease], previous: ArrayLike, plan: KMeansPlan,
                     min_count: float) -> tuple[Floats, Floats]:
    """Coordinator's update: sum the releases; ``centroid = sum / count`` where the summed
    noisy count exceeds ``min_count`` (otherwise the previous centroid is kept), clipped to
    the box. Returns ``(centroids, summed noisy counts)``."""
    prev = np.asarray(previous, dtype=np.float64)
    if not releases:
        raise ValueError("no releases to update from")
    counts = np.sum([r.counts for r in releases], axis=0).astype(np.float64)
    sums = np.sum([r.sums for r in releases], axis=0).astype(np.float64) * plan.step
    if sums.shape != prev.shape:
        raise ValueError(f"releases have shape {sums.shape}, centroids {prev.shape}")
    keep = counts <= max(min_count, 0.0)
    safe = np.where(keep, 1.0, counts)
    new = np.where(keep[:, None], prev, sums / safe[:, None])
    return np.clip(new, plan.lo, plan.hi), counts


def fuse_centroids(centroids: ArrayLike, weights: ArrayLike, k: int) -> tuple[Floats, Floats]:
    """Merge the closest pair of centroids, weighted by their noisy counts, until ``k`` remain.

    Negative noisy counts weigh 0 (a pair of weight 0 merges to its midpoint); the total of
    the floored weights is preserved. Post-processing of released values: no privacy cost.
    """
    cents = [np.asarray(c, dtype=np.float64) for c in np.asarray(centroids, dtype=np.float64)]
    w = [max(float(v), 0.0) for v in np.asarray(weights, dtype=np.float64).ravel()]
    if len(w) != len(cents) or k < 1:
        raise ValueError(f"need one weight per centroid and k >= 1, got {len(w)}, {k}")
    while len(cents) > k:
        stack = np.array(cents)
        dist = ((stack[:, None, :] - stack[None, :, :]) ** 2).sum(-1)
        dist[np.tril_indices(len(cents))] = np.inf
        i, j = (int(v) for v in np.unravel_index(int(np.argmin(dist)), dist.shape))
        total = w[i] + w[j]
        merged = ((w[i] * cents[i] + w[j] * cents[j]) / total if total > 0
                  else (cents[i] + cents[j]) / 2.0)
        cents[i], w[i] = merged, total
        del cents[j], w[j]
    return np.array(cents), np.array(w)


def fit_federated(parts: Sequence[ArrayLike], plan: KMeansPlan,
                  seed: bytes) -> tuple[Floats, Floats, PrivacyBudget]:
    """Simulate a study in one process: ``T`` federated rounds over ``parts`` (one array per
    participant) then fusion to ``k``. Returns centroids, their fused noisy weights and what
    each participant spent (the same for all)."""
    cents = initial_centroids(seed, plan.n_centroids, plan.lo, plan.hi)
    counts = np.zeros(plan.n_centroids)
    spent = PrivacyBudget.zero()
    for r in range(plan.rounds):
        releases = [release_round(round_statistics(x, cents, plan), plan, r) for x in parts]
        spent = spent + releases[0].cost
        cents, counts = update_centroids(releases, cents, plan,
                                         count_floor(plan, r, len(parts)))
    fused, weights = fuse_centroids(cents, counts, plan.k)
    return fused, weights, spent
