"""The mechanism of one cohort round: its noise, its cost and its honest range, in one object.

A round's vector is a concatenation of :class:`Part` s (k-means: sums then counts; a DPM
level: its histograms; the DPM leaf round: counts then histograms). Each part states its
sensitivity, its noise (discrete Laplace at ``scale = sensitivity / epsilon`` or the discrete
Gaussian at integer L2 ``sensitivity`` for ``(epsilon, delta)``) and, when the study has a
public per-participant record bound ``R`` (``aggregation.max_records``), the exact range
``[low, high]`` of every entry. A :class:`RoundMechanism` is looked up ONCE per round
(:func:`kmeans_round`, :func:`dpm_level`, :func:`dpm_leaves`, which refuse a round index or
level outside the public plan); the same object noises the vector (:meth:`RoundMechanism.release`)
and says what that costs (:attr:`RoundMechanism.cost`), so the charge and the noise can never
read different tables ("a measurement carries its own privacy map"). The poisoning bounds of
:mod:`common.cohorts.bounds` come from the same object.

Record bound. An honest participant clips every exact entry into ``[low, high]`` before the
noise (:meth:`RoundMechanism.release`): clipping each coordinate into a fixed interval is
1-Lipschitz in every coordinate, so it never increases an L1 or L2 distance and the stated
sensitivities still hold (as :mod:`common.secagg.vector` clips counts at ``max_records``).
A count (of a cluster, a leaf, an interval) of one participant lies in ``[0, R]``; a k-means
coordinate sum in grid units in ``[R min(lo_u, 0), R max(hi_u, 0)]`` with
``lo_u = rint(lo / step)``, ``hi_u = rint(hi / step)``. The clip changes nothing for a
participant with at most ``R`` records.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from common.budget import PrivacyBudget
from common.cohorts.dpm_plan import DPMPlan
from common.cohorts.plan import KMeansPlan
from common.noise.scale import laplace_scale

__all__ = ["DEFAULT_MAX_RECORDS", "Part", "RoundMechanism", "dpm_leaves", "dpm_level",
           "kmeans_round"]

Ints = NDArray[np.int64]
DEFAULT_MAX_RECORDS = 1_000_000
"""The record bound of a study whose config states none: ``AggregationParams().max_records``."""


@dataclass(frozen=True, eq=False)
class Part:
    """``size`` consecutive entries noised by one mechanism.

    ``sensitivity`` is the L1 sensitivity under ``"laplace"`` and the integer L2 sensitivity
    under ``"gaussian"``. ``low``/``high`` (scalars or one value per entry, or ``None`` when
    the study states no record bound) are the exact range of an honest entry after clipping.
    """

    name: str
    size: int
    noise: Literal["laplace", "gaussian"]
    sensitivity: int
    epsilon: Decimal
    delta: Decimal = Decimal(0)
    low: Ints | None = None
    high: Ints | None = None

    @property
    def cost(self) -> PrivacyBudget:
        """What noising this part once costs."""
        return PrivacyBudget(self.epsilon, self.delta)

    @property
    def scale(self) -> Fraction | float:
        """The noise scale: ``sensitivity / epsilon`` (Laplace, exact) or the calibrated
        Gaussian scale (:func:`common.noise.gaussian.l2_scale`)."""
        if self.noise == "gaussian":
            from common.noise.gaussian import l2_scale

            return l2_scale(self.sensitivity, self.epsilon, self.delta)
        return laplace_scale(self.sensitivity, self.epsilon)

    def measured_epsilon(self) -> Decimal:
        """Epsilon of the measurement :meth:`add_noise` runs, from OpenDP's own privacy map
        at ``sensitivity`` (at ``delta`` for the Gaussian)."""
        if self.noise == "gaussian":
            from common.noise.gaussian import l2_epsilon

            return Decimal(l2_epsilon(self.sensitivity, float(self.scale), self.delta))
        from common.noise.laplace import make_count_noise

        meas = make_count_noise(self.sensitivity, self.epsilon)
        return Decimal(meas.map(self.sensitivity))  # type: ignore[no-untyped-call]

    def clip(self, exact: ArrayLike) -> Ints:
        """``exact`` clipped into ``[low, high]`` (unchanged without a record bound)."""
        values = np.asarray(exact, dtype=np.int64)
        if self.low is None or self.high is None:
            return values
        return np.asarray(np.clip(values, self.low, self.high), dtype=np.int64)

    def add_noise(self, exact: ArrayLike) -> Ints:
        """One noise draw per entry, from OpenDP (call once per release)."""
        if self.noise == "gaussian":
            from common.noise.gaussian import add_gaussian

            return add_gaussian(exact, self.sensitivity, self.epsilon, self.delta)
        from common.noise.laplace import add_discrete_laplace

        return add_discrete_laplace(np.asarray(exact, dtype=np.int64), self.sensitivity,
                                    self.epsilon)


@dataclass(frozen=True, eq=False)
class RoundMechanism:
    """The parts of one round's vector, in order; its cost is their basic composition."""

    parts: tuple[Part, ...]

    @property
    def size(self) -> int:
        """Length of the round's vector."""
        return sum(p.size for p in self.parts)

    @property
    def cost(self) -> PrivacyBudget:
        """What the round charges: the sum of its parts' costs (basic composition)."""
        return sum((p.cost for p in self.parts), PrivacyBudget.zero())

    def split(self, vector: ArrayLike) -> list[Ints]:
        """``vector`` cut into its parts (``ValueError`` on a wrong length)."""
        v = np.asarray(vector, dtype=np.int64)
        if v.shape != (self.size,):
            raise ValueError(f"the round takes a vector of {self.size} values, got {v.shape}")
        cuts = np.cumsum([p.size for p in self.parts])[:-1]
        return list(np.split(v, cuts))

    def clipped(self, exact: ArrayLike) -> int:
        """How many entries of ``exact`` the record bound changes (local only, never sent)."""
        return sum(int(np.count_nonzero(p.clip(x) != x))
                   for p, x in zip(self.parts, self.split(exact), strict=True))

    def release(self, exact: ArrayLike) -> Ints:
        """The noisy vector: each part clipped to its record bound, then noised once."""
        pieces = [p.add_noise(p.clip(x)) for p, x in zip(self.parts, self.split(exact),
                                                          strict=True)]
        return np.concatenate(pieces).astype(np.int64) if pieces else np.zeros(0, np.int64)


def _counts(name: str, size: int, sensitivity: int, epsilon: Decimal,
            max_records: int | None, noise: Literal["laplace", "gaussian"] = "laplace",
            delta: Decimal = Decimal(0)) -> Part:
    """A part of counts (of a cluster, a leaf or an interval): one participant's lie in
    ``[0, max_records]``."""
    if max_records is None:
        return Part(name, size, noise, sensitivity, epsilon, delta)
    return Part(name, size, noise, sensitivity, epsilon, delta, np.zeros(size, np.int64),
                np.full(size, max_records, np.int64))


def _index(value: object, stop: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < stop:
        raise ValueError(f"{what} {value!r} is outside the public plan (0 to {stop - 1})")
    return value


def kmeans_round(plan: KMeansPlan, round_index: int, max_records: int | None = None,
                 clusters: int | None = None) -> RoundMechanism:
    """Round ``round_index`` (0-based, ``0 .. rounds - 1``) of a k-means study: sums
    (``n_c * d``, grid units) then counts (``n_c``, ``plan.n_centroids`` unless
    ``clusters`` says otherwise); ``ValueError`` outside the plan."""
    r = _index(round_index, plan.rounds, "k-means round index")
    eps_counts, eps_sums = plan.budgets()[r]
    n_c, d = plan.n_centroids if clusters is None else clusters, plan.lo.size
    low = high = None
    if max_records is not None:
        # exact Python ints: R times a grid coordinate may pass int64 (refused, never wrapped)
        low_j = [max_records * min(int(v), 0) for v in np.rint(plan.lo / plan.step)]
        high_j = [max_records * max(int(v), 0) for v in np.rint(plan.hi / plan.step)]
        if max(high_j + [-v for v in low_j]) > 2**63 - 1:
            raise ValueError(f"{max_records} records in one cluster may sum past int64; lower "
                             "max_records or resolution_bits")
        low = np.tile(np.array(low_j, dtype=np.int64), n_c)
        high = np.tile(np.array(high_j, dtype=np.int64), n_c)
    if plan.sum_noise == "gaussian":
        sums = Part("sums", n_c * d, "gaussian", plan.sum_l2_sensitivity, eps_sums,
                    plan.deltas()[r], low, high)
    else:
        sums = Part("sums", n_c * d, "laplace", plan.sum_sensitivity, eps_sums, low=low,
                    high=high)
    return RoundMechanism((sums, _counts("counts", n_c, 1, eps_counts, max_records)))


def dpm_level(plan: DPMPlan, level: int, size: int, max_records: int | None = None
              ) -> RoundMechanism:
    """Level ``level`` (``0 .. depth - 1``) of a DPM tree: ``size`` histogram intervals at
    L1 sensitivity ``m``; ``ValueError`` outside the plan."""
    eps = plan.budgets().levels[_index(level, plan.depth, "DPM level")]
    return RoundMechanism((_counts(f"level {level} histograms", size, plan.m, eps,
                                   max_records),))


def dpm_leaves(plan: DPMPlan, leaves: int, size: int, max_records: int | None = None
               ) -> RoundMechanism:
    """The DPM leaf round: ``leaves`` counts, then ``size`` histogram intervals over all
    ``d`` features (L1 ``d`` under Laplace, integer L2 ``ceil(sqrt(d))`` under Gaussian)."""
    budget = plan.budgets()
    counts = _counts("leaf counts", leaves, 1, budget.leaf_counts, max_records)
    if plan.leaf_noise == "gaussian":
        from common.noise.gaussian import l2_sensitivity

        hists = _counts("leaf histograms", size, l2_sensitivity(plan.d),
                        budget.leaf_histograms, max_records, "gaussian", budget.leaf_delta)
    else:
        hists = _counts("leaf histograms", size, plan.d, budget.leaf_histograms, max_records)
    return RoundMechanism((counts, hists))
