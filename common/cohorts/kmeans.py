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
stream of :mod:`common.histograms.hashing` under its own key); it never reads data or numpy's
samplers.

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

Noise, from OpenDP only (:mod:`common.cohorts.mechanism`)
--------------------------------------------------------
Counts: discrete Laplace of scale ``1 / eps_counts`` on every cluster. Sums: integer discrete
Laplace of scale ``S / eps_sums`` on every cluster and coordinate, in grid units. One round
costs ``eps_counts + eps_sums`` (basic composition). :func:`split_epsilon` splits a total
budget over ``T`` rounds (exact in 1e-9 units; the first rounds take the remainder)
and each round between counts and sums by the public ``count_share``.

Gaussian sums (``plan.sum_noise == "gaussian"``, :mod:`common.noise.gaussian`): a record
moves one cluster's sum vector by its own grid units, so the sums' L2 sensitivity is the
box's fixed-point half-diagonal ``S2 = ceil(sqrt(sum_j max(|rint(lo_j/step)|,
|rint(hi_j/step)|)**2))`` (``2**bits sqrt(d)`` on ``[-1, 1]^d``: ``sqrt(d)`` in data units
against the L1 figure ``d``). OpenDP's discrete Gaussian is calibrated to
``(eps_sums, delta_r)`` at ``S2``; ``delta_r`` is the round's even share of the study's
``1 / (n sqrt n)`` for the declared ``n`` (:func:`common.cohorts.plan.split_delta`). Counts
stay discrete Laplace (pure epsilon, sensitivity 1). A round costs
``(eps_counts + eps_sums, delta_r)``; over ``T`` rounds the ledgers add up to
``(epsilon, 1 / (n sqrt n))`` exactly (basic composition, as for the DPM's Gaussian leaves).

Substitution neighbours (replace one record) would double both sensitivities.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from common.budget import PrivacyBudget
from common.cohorts.mechanism import kmeans_round
from common.cohorts.plan import KMeansPlan, count_floor, split_epsilon
from common.histograms.seeded import Sha256Stream, as_bounds

__all__ = [
    "KMeansPlan",
    "RoundRelease",
    "RoundStatistics",
    "count_floor",
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



def initial_centroids(seed: bytes, n_centroids: int, lo: ArrayLike, hi: ArrayLike) -> Floats:
    """``n_centroids`` points uniform in the box ``[lo, hi]``, from the public seed only.

    Block ``t`` of the stream is ``sha256(key || t)`` with key ``"fedod-kmeans-init/1\\0" ||
    len(seed) (u32 LE) || seed || n_centroids (u32) || d (u32)``; coordinates are drawn row by
    row as ``lo_j + (hi_j - lo_j) * u``.
    """
    lo_a, hi_a = as_bounds(lo, hi)
    if not isinstance(seed, bytes) or not seed:
        raise ValueError("seed must be non-empty bytes")
    if isinstance(n_centroids, bool) or not isinstance(n_centroids, int) or n_centroids < 1:
        raise ValueError(f"n_centroids must be a positive integer, got {n_centroids!r}")
    d = lo_a.size
    key = (_INIT_TAG + len(seed).to_bytes(4, "little") + seed
           + n_centroids.to_bytes(4, "little") + d.to_bytes(4, "little"))
    stream = Sha256Stream(key)
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
    """Noise ``stats`` with round ``round_index``'s budget (module docstring for the scales).

    Noise and cost come from one lookup, :func:`common.cohorts.mechanism.kmeans_round`, which
    refuses a round index outside ``0 .. rounds - 1`` (``ValueError``).
    """
    counts = np.asarray(stats.counts, dtype=np.int64)
    mech = kmeans_round(plan, round_index, clusters=counts.size)
    noisy = mech.release(np.concatenate([np.asarray(stats.sums, dtype=np.int64).ravel(),
                                         counts]))
    sums, noisy_counts = mech.split(noisy)
    return RoundRelease(sums=sums.reshape(np.shape(stats.sums)), counts=noisy_counts,
                        cost=mech.cost)


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


def fuse_centroids(centroids: ArrayLike, weights: ArrayLike, k: int,
                   min_weight: float | None = None) -> tuple[Floats, Floats]:
    """Merge the closest pair of centroids, weighted by their noisy counts, until ``k`` remain.

    Negative noisy counts weigh 0 (a pair of weight 0 merges to its midpoint); the total of
    the floored weights is preserved. With ``min_weight`` (not in the paper), centroids
    weighing at most that are first dropped, keeping at least the ``k`` heaviest: seed-drawn
    centroids that never attracted data would otherwise survive as empty clusters.
    Post-processing of released values: no privacy cost.
    """
    cents = [np.asarray(c, dtype=np.float64) for c in np.asarray(centroids, dtype=np.float64)]
    w = [max(float(v), 0.0) for v in np.asarray(weights, dtype=np.float64).ravel()]
    if len(w) != len(cents) or k < 1:
        raise ValueError(f"need one weight per centroid and k >= 1, got {len(w)}, {k}")
    if min_weight is not None:
        order = sorted(range(len(w)), key=lambda i: -w[i])
        kept = sorted(i for rank, i in enumerate(order) if rank < k or w[i] > min_weight)
        cents, w = [cents[i] for i in kept], [w[i] for i in kept]
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


def fit_federated(parts: Sequence[ArrayLike], plan: KMeansPlan, seed: bytes,
                  prune: bool = False) -> tuple[Floats, Floats, PrivacyBudget]:
    """Simulate a study in one process: ``T`` federated rounds over ``parts`` (one array per
    participant) then fusion to ``k`` (``prune``: drop centroids at or under the last
    round's count floor first). Returns centroids, their fused noisy weights and what each
    participant spent (the same for all)."""
    cents = initial_centroids(seed, plan.n_centroids, plan.lo, plan.hi)
    counts = np.zeros(plan.n_centroids)
    spent = PrivacyBudget.zero()
    for r in range(plan.rounds):
        releases = [release_round(round_statistics(x, cents, plan), plan, r) for x in parts]
        spent = spent + releases[0].cost
        cents, counts = update_centroids(releases, cents, plan,
                                         count_floor(plan, r, len(parts)))
    floor = count_floor(plan, plan.rounds - 1, len(parts)) if prune else None
    fused, weights = fuse_centroids(cents, counts, plan.k, floor)
    return fused, weights, spent
