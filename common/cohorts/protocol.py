"""The round protocol a cohort method runs through the coordinator, as pure functions.

A method is a :class:`RoundProtocol`: from a public :class:`CohortState` each participant
computes an exact integer vector over its own records (:meth:`~RoundProtocol.exact`, additive
over chunks of records), noises it once with the round's budget
(:meth:`~RoundProtocol.release`, costing :meth:`~RoundProtocol.cost`); the coordinator sums
the released vectors into the next state (:meth:`~RoundProtocol.advance`) and, once
:meth:`~RoundProtocol.finished`, post-processes the state into the released
:class:`~common.cohorts.model.CohortModel` (:meth:`~RoundProtocol.finish`). The number of
rounds is at most :attr:`~RoundProtocol.rounds` (a tree may stop early). The HTTP and SQL
shells (``coordinator.services.cohorts``, ``participant.cohorts``) are generic over this
interface; :class:`KMeansProtocol` is DP-KCCM (:mod:`common.cohorts.kmeans`).

Privacy: a round releases only :meth:`~RoundProtocol.release`'s output, whose sensitivity and
noise each method states; everything in a :class:`CohortState` is computed from released
values and public parameters (post-processing).
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
from common.cohorts.model import CohortModel
from common.cohorts.plan import KMeansPlan, count_floor

__all__ = ["CohortState", "KMeansProtocol", "RoundProtocol"]

Ints = NDArray[np.int64]
MAX_ABS_VALUE = 2**62
"""Largest magnitude of a released value the coordinator accepts (sums stay in int64)."""


@dataclass(frozen=True)
class CohortState:
    """Public state before round ``done`` (0-based): method data from released values only.

    ``data`` is JSON-compatible; ``participants`` is how many releases the last round summed.
    """

    done: int
    data: dict[str, Any]
    participants: int = 0

    def to_json(self) -> str:
        """Canonical JSON (floats as repr: :meth:`from_json` reads them back exactly)."""
        return json.dumps({"done": self.done, "data": self.data,
                           "participants": self.participants}, sort_keys=True)

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

    def cost(self, state: CohortState) -> PrivacyBudget:
        """What releasing the round that starts from ``state`` costs one participant."""

    def exact(self, state: CohortState, X: ArrayLike) -> Ints:
        """A participant's exact vector over records ``X`` (private; additive over chunks)."""

    def release(self, exact: Ints, state: CohortState) -> Ints:
        """The noisy vector sent for the round from ``state`` (drawn once per round)."""

    def advance(self, state: CohortState, releases: Sequence[Ints]) -> CohortState:
        """The coordinator's next state from the released vectors of one round."""

    def finished(self, state: CohortState) -> bool:
        """True when no round is left: :meth:`finish` gives the model."""

    def finish(self, state: CohortState) -> CohortModel:
        """The released model after the last round (post-processing)."""


class KMeansProtocol:
    """DP-KCCM as a round protocol: the vector is ``[sums (n_c * d, grid units), counts]``.

    Sensitivity (add/remove one record): counts 1, sums ``plan.sum_sensitivity`` in L1 or,
    with Gaussian sums, ``plan.sum_l2_sensitivity`` in L2 (:mod:`common.cohorts.kmeans`);
    each part is noised by :func:`kmeans.release_round`.
    """

    def __init__(self, plan: KMeansPlan, seed: bytes, prune: bool = True) -> None:
        self.plan, self.seed, self.prune = plan, seed, prune
        self.rounds = plan.rounds

    def start(self) -> CohortState:
        cents = kmeans.initial_centroids(self.seed, self.plan.n_centroids, self.plan.lo,
                                         self.plan.hi)
        return CohortState(0, {"centroids": cents.tolist(),
                               "counts": [0.0] * self.plan.n_centroids})

    def size(self, state: CohortState) -> int:
        return self.plan.n_centroids * (self.plan.lo.size + 1)

    def cost(self, state: CohortState) -> PrivacyBudget:
        return self.plan.costs()[state.done]

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
        noisy = kmeans.release_round(self._split(exact), self.plan, state.done)
        return np.concatenate([noisy.sums.ravel(), noisy.counts]).astype(np.int64)

    def advance(self, state: CohortState, releases: Sequence[Ints]) -> CohortState:
        cost = self.cost(state)
        parts = [kmeans.RoundRelease(s.sums, s.counts, cost)
                 for s in (self._split(r) for r in releases)]
        floor = count_floor(self.plan, state.done, len(parts))
        cents, counts = kmeans.update_centroids(parts, state.data["centroids"], self.plan, floor)
        return CohortState(state.done + 1, {"centroids": cents.tolist(),
                                            "counts": counts.tolist()}, len(parts))

    def finished(self, state: CohortState) -> bool:
        return state.done >= self.rounds

    def finish(self, state: CohortState) -> CohortModel:
        floor = None
        if self.prune and state.participants:
            floor = count_floor(self.plan, self.rounds - 1, state.participants)
        cents, weights = kmeans.fuse_centroids(state.data["centroids"], state.data["counts"],
                                               self.plan.k, floor)
        return CohortModel(cents, weights, self.plan.lo, self.plan.hi)
