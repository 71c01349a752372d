"""The round protocol a cohort method runs through the coordinator, as pure functions.

A method is a :class:`RoundProtocol`: from a public :class:`CohortState` each participant
computes an exact integer vector over its own records (:meth:`~RoundProtocol.exact`, additive
over chunks of records), noises it once with the round's budget
(:meth:`~RoundProtocol.release`, costing :meth:`~RoundProtocol.cost`); the coordinator sums
the released vectors into the next state (:meth:`~RoundProtocol.advance`; a round whose
releases cannot be used is stepped over by :meth:`~RoundProtocol.skip`) and, once
:meth:`~RoundProtocol.finished`, post-processes the state into the released
:class:`~common.cohorts.model.CohortModel` (:meth:`~RoundProtocol.finish`). The number of
rounds is at most :attr:`~RoundProtocol.rounds` (a tree may stop early). The HTTP and SQL
shells (``coordinator.services.cohorts``, ``participant.cohorts.rounds``) are generic over this
interface; :class:`KMeansProtocol` is DP-KCCM (:mod:`common.cohorts.kmeans`).

Privacy: a round releases only :meth:`~RoundProtocol.release`'s output, whose sensitivity and
noise each method states; everything in a :class:`CohortState` is computed from released
values and public parameters (post-processing). Noise, cost and the poisoning bounds of a
round come from one lookup, :meth:`~RoundProtocol.mechanism`
(:mod:`common.cohorts.mechanism`), which refuses a round index or level outside the public
plan; the coordinator sums releases with :func:`common.cohorts.bounds.checked_sum` (each
release inside its bounds, no int64 wrap).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from common.budget import PrivacyBudget
from common.cohorts import kmeans
from common.cohorts.bounds import ReleaseBounds, checked_sum, release_bounds
from common.cohorts.mechanism import DEFAULT_MAX_RECORDS, RoundMechanism, kmeans_round
from common.cohorts.model import CohortModel
from common.cohorts.plan import KMeansPlan, count_floor

__all__ = ["CohortState", "KMeansProtocol", "RoundProtocol"]

Ints = NDArray[np.int64]
MAX_ABS_VALUE = 2**62
"""Largest magnitude the wire accepts for a released value (:mod:`common.cohorts.schemas`);
the poisoning bounds of :mod:`common.cohorts.bounds` are far tighter."""


@dataclass(frozen=True)
class CohortState:
    """Public state before round ``done`` (0-based): method data from released values only.

    ``data`` is JSON-compatible; ``participants`` is how many releases the last round summed.
    """

    done: int
    data: dict[str, Any]
    participants: int = 0

    def to_json(self) -> str:
        """Canonical JSON (floats as repr: :meth:`from_json` reads them back exactly);
        ``ValueError`` for a NaN or infinite value, which no stored state may hold."""
        return json.dumps({"done": self.done, "data": self.data,
                           "participants": self.participants}, sort_keys=True, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> CohortState:
        raw = json.loads(text)
        return cls(int(raw["done"]), dict(raw["data"]), int(raw.get("participants", 0)))


class RoundProtocol(Protocol):
    """What the coordinator and participants need of a cohort method (see module docstring)."""

    rounds: int
    """Most rounds a run takes."""

    def start(self) -> CohortState:
        """The public state before round 0 (from public parameters only)."""

    def size(self, state: CohortState) -> int:
        """Length of the vector released from ``state``."""

    def mechanism(self, state: CohortState) -> RoundMechanism:
        """The round's noise, cost and honest range (``ValueError`` outside the plan)."""

    def bounds(self, state: CohortState) -> ReleaseBounds:
        """The range every entry of an honest release of the round lies in."""

    def cost(self, state: CohortState) -> PrivacyBudget:
        """What releasing the round that starts from ``state`` costs one participant."""

    def exact(self, state: CohortState, X: ArrayLike) -> Ints:
        """A participant's exact vector over records ``X`` (private; additive over chunks)."""

    def release(self, exact: Ints, state: CohortState) -> Ints:
        """The noisy vector sent for the round from ``state`` (drawn once per round)."""

    def advance(self, state: CohortState, releases: Sequence[Ints]) -> CohortState:
        """The coordinator's next state from the released vectors of one round."""

    def skip(self, state: CohortState) -> CohortState | None:
        """The next state when the round from ``state`` could not be used (its releases are
        ignored, the public state keeps its last good value), or None if it cannot move on."""

    def finished(self, state: CohortState) -> bool:
        """True when no round is left: :meth:`finish` gives the model."""

    def finish(self, state: CohortState) -> CohortModel:
        """The released model after the last round (post-processing)."""


class KMeansProtocol:
    """DP-KCCM as a round protocol: the vector is ``[sums (n_c * d, grid units), counts]``.

    Sensitivity (add/remove one record): counts 1, sums ``plan.sum_sensitivity`` in L1 or,
    with Gaussian sums, ``plan.sum_l2_sensitivity`` in L2 (:mod:`common.cohorts.kmeans`);
    each part is noised by :func:`common.cohorts.mechanism.kmeans_round`, after clipping to
    the public record bound ``max_records``.
    """

    def __init__(self, plan: KMeansPlan, seed: bytes, prune: bool = True,
                 max_records: int = DEFAULT_MAX_RECORDS) -> None:
        self.plan, self.seed, self.prune = plan, seed, prune
        self.max_records = max_records
        self.rounds = plan.rounds

    def start(self) -> CohortState:
        cents = kmeans.initial_centroids(self.seed, self.plan.n_centroids, self.plan.lo,
                                         self.plan.hi)
        return CohortState(0, {"centroids": cents.tolist(),
                               "counts": [0.0] * self.plan.n_centroids})

    def size(self, state: CohortState) -> int:
        return self.plan.n_centroids * (self.plan.lo.size + 1)

    def mechanism(self, state: CohortState) -> RoundMechanism:
        return kmeans_round(self.plan, state.done, self.max_records)

    def bounds(self, state: CohortState) -> ReleaseBounds:
        return release_bounds(self.mechanism(state))

    def cost(self, state: CohortState) -> PrivacyBudget:
        return self.mechanism(state).cost

    def _split(self, vector: ArrayLike) -> kmeans.RoundStatistics:
        v = np.asarray(vector, dtype=np.int64)
        n_c, d = self.plan.n_centroids, self.plan.lo.size
        if v.shape != (n_c * (d + 1),):
            raise ValueError(f"a k-means round vector has {n_c * (d + 1)} values, got {v.shape}")
        return kmeans.RoundStatistics(sums=v[: n_c * d].reshape(n_c, d), counts=v[n_c * d:])

    def exact(self, state: CohortState, X: ArrayLike) -> Ints:
        stats = kmeans.round_statistics(X, state.data["centroids"], self.plan)
        return np.concatenate([stats.sums.ravel(), stats.counts]).astype(np.int64)

    def release(self, exact: Ints, state: CohortState) -> Ints:
        return self.mechanism(state).release(exact)

    def advance(self, state: CohortState, releases: Sequence[Ints]) -> CohortState:
        mech = self.mechanism(state)
        total = self._split(checked_sum(releases, release_bounds(mech)))
        floor = count_floor(self.plan, state.done, len(releases))
        cents, counts = kmeans.update_centroids(
            [kmeans.RoundRelease(total.sums, total.counts, mech.cost)],
            state.data["centroids"], self.plan, floor)
        return CohortState(state.done + 1, {"centroids": cents.tolist(),
                                            "counts": counts.tolist()}, len(releases))

    def skip(self, state: CohortState) -> CohortState | None:
        self.mechanism(state)  # a round inside the plan
        return CohortState(state.done + 1, state.data, state.participants)

    def finished(self, state: CohortState) -> bool:
        return state.done >= self.rounds

    def finish(self, state: CohortState) -> CohortModel:
        floor = None
        if self.prune and state.participants:
            floor = count_floor(self.plan, self.rounds - 1, state.participants)
        cents, weights = kmeans.fuse_centroids(state.data["centroids"], state.data["counts"],
                                               self.plan.k, floor)
        return CohortModel(cents, weights, self.plan.lo, self.plan.hi)
