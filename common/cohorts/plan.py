"""Public parameters of a private k-means study and its exact budget split (docs/COHORTS.md).

Everything here is public (signed config): the box, ``k``, the fusion factor, the rounds,
each participant's epsilon and how it is split; see :mod:`common.cohorts.kmeans` for the
mechanism and its sensitivity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal

import numpy as np
from numpy.typing import NDArray

from common.budget import DELTA_QUANTUM, EPSILON_QUANTUM, PrivacyBudget
from common.histograms.seeded import as_bounds

__all__ = ["KMeansPlan", "SCHEDULES", "SUM_NOISES", "count_floor", "round_weights",
           "split_delta", "split_epsilon"]

Floats = NDArray[np.float64]

SCHEDULES = ("even", "adaptive")
"""How a participant's epsilon is spread over the rounds (:func:`round_weights`)."""

SUM_NOISES = ("laplace", "gaussian")
"""Noise on the per-cluster sums (:mod:`common.cohorts.kmeans`)."""


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
    schedule : "even" | "adaptive", default "even"
        How ``epsilon`` is spread over the rounds (:func:`round_weights`).
    sum_noise : "laplace" | "gaussian", default "laplace"
        Noise on the per-cluster sums: discrete Laplace at L1 sensitivity
        :attr:`sum_sensitivity` (pure epsilon), or the discrete Gaussian at L2 sensitivity
        :attr:`sum_l2_sensitivity`, charged ``(epsilon, delta)`` per round (:meth:`costs`).
    declared_n : int | None
        Gaussian only (required there): the declared, public number of records of the
        whole study; the study's total delta is ``1 / (n sqrt n)`` (:func:`split_delta`).
    """

    lo: Floats
    hi: Floats
    k: int
    epsilon: Decimal | int | str
    over: int = 3
    rounds: int = 5
    count_share: Decimal | str = "0.2"
    resolution_bits: int = 12
    schedule: str = "even"
    sum_noise: str = "laplace"
    declared_n: int | None = None

    def __post_init__(self) -> None:
        lo, hi = as_bounds(self.lo, self.hi)
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)
        for name, low, high in (("k", 1, 10_000), ("over", 1, 100), ("rounds", 1, 1000),
                                ("resolution_bits", 1, 30)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
        split_epsilon(self.epsilon, self.rounds, self.count_share, self.schedule)
        if self.sum_noise not in SUM_NOISES:
            raise ValueError(f"sum_noise must be one of {SUM_NOISES}, got {self.sum_noise!r}")
        if (self.sum_noise == "gaussian") != (self.declared_n is not None):
            raise ValueError("declared_n is required with Gaussian sum noise, and only there")
        self.deltas()

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

    @property
    def sum_l2_sensitivity(self) -> int:
        """L2 change of the integer sums when one record is added or removed: the box's
        fixed-point half-diagonal ``sqrt(sum_j max(|rint(lo_j/step)|, |rint(hi_j/step)|)**2)``
        (``2**bits sqrt(d)`` on ``[-1, 1]^d``), rounded up to an integer (OpenDP's integer
        L2 metric; exact when the sum of squares is a square)."""
        lo_u, hi_u = np.rint(self.lo / self.step), np.rint(self.hi / self.step)
        squares = sum(int(v) ** 2 for v in np.maximum(np.abs(lo_u), np.abs(hi_u)))
        return max(1, math.isqrt(squares - 1) + 1) if squares else 1

    def budgets(self) -> tuple[tuple[Decimal, Decimal], ...]:
        """Per round ``(eps_counts, eps_sums)``; see :func:`split_epsilon`."""
        return split_epsilon(self.epsilon, self.rounds, self.count_share, self.schedule)

    def deltas(self) -> tuple[Decimal, ...]:
        """Per round delta of the sums: 0 under Laplace, :func:`split_delta` under Gaussian."""
        if self.declared_n is None:
            return (Decimal(0),) * self.rounds
        return split_delta(self.declared_n, self.rounds)

    def costs(self) -> tuple[PrivacyBudget, ...]:
        """What each round charges a participant: ``(eps_counts + eps_sums, delta_r)``
        (basic composition of the counts and the sums; over the rounds the epsilons and
        the deltas add up to ``epsilon`` and the study's delta exactly)."""
        pairs = zip(self.budgets(), self.deltas(), strict=True)
        return tuple(PrivacyBudget(c + s, d) for (c, s), d in pairs)

    def total_cost(self) -> PrivacyBudget:
        """What the ``rounds`` rounds charge a participant in all."""
        return sum(self.costs(), PrivacyBudget.zero())


def round_weights(rounds: int, schedule: str = "even") -> tuple[int, ...]:
    """Relative epsilon of each round, from public inputs only (``rounds``, ``schedule``).

    ``even``: 1 per round. ``adaptive`` (DP-KCCM's allocation, Ni et al. 2021, section
    3.1): the rounds fall into three consecutive blocks, round ``r`` (0-based) in block
    ``floor(3 r / rounds)``, and a round of block ``b`` weighs ``b + 1``, so later rounds,
    whose centroids move less, get more epsilon (less noise). At ``rounds = 12`` this is the
    paper's split exactly: epsilon/24 for rounds 1-4, epsilon/12 for 5-8, epsilon/8 for 9-12.
    """
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive integer, got {rounds!r}")
    if schedule == "even":
        return (1,) * rounds
    if schedule == "adaptive":
        return tuple(3 * r // rounds + 1 for r in range(rounds))
    raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")


def split_epsilon(epsilon: Decimal | int | str, rounds: int, count_share: Decimal | str = "0.2",
                  schedule: str = "even") -> tuple[tuple[Decimal, Decimal], ...]:
    """Split ``epsilon`` over ``rounds`` in proportion to :func:`round_weights`, each round
    between counts and sums.

    Exact in 1e-9 units: round ``r`` takes ``floor(units * w_r / W)`` units, and the units
    that flooring leaves go one each to the first rounds, so the rounds' totals sum to
    ``epsilon`` exactly (even: the first ``units % rounds`` rounds take one unit more);
    ``eps_counts`` is ``floor(round * count_share)`` units. The split depends on public
    inputs only. Raises ``ValueError`` if any part would be zero.
    """
    total = PrivacyBudget(epsilon).epsilon
    share = Decimal(str(count_share))
    if not share.is_finite() or not 0 < share < 1:
        raise ValueError(f"count_share must be in (0, 1), got {count_share!r}")
    weights = round_weights(rounds, schedule)
    units, total_weight = int(total / EPSILON_QUANTUM), sum(weights)
    base = [units * w // total_weight for w in weights]
    left = units - sum(base)
    out = []
    for r in range(rounds):
        round_units = base[r] + (1 if r < left else 0)
        count_units = int((round_units * share).to_integral_value(ROUND_FLOOR))
        if count_units < 1 or round_units - count_units < 1:
            raise ValueError(f"epsilon {total} is too small to split over {rounds} rounds")
        out.append((count_units * EPSILON_QUANTUM, (round_units - count_units) * EPSILON_QUANTUM))
    return tuple(out)


def split_delta(declared_n: int, rounds: int) -> tuple[Decimal, ...]:
    """The study's delta ``1 / (n sqrt n)`` (:func:`common.noise.gaussian.declared_delta`)
    split evenly over ``rounds`` in 1e-18 units, the first rounds taking the remainder, so
    the rounds' deltas add up to it exactly (basic composition). Raises ``ValueError`` if a
    round's share would be zero."""
    from common.noise.gaussian import declared_delta  # imports OpenDP: only when used

    units = int(declared_delta(declared_n) / DELTA_QUANTUM)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= units:
        raise ValueError(f"cannot split delta ({units} x 1e-18) over {rounds!r} rounds")
    return tuple((units // rounds + (1 if r < units % rounds else 0)) * DELTA_QUANTUM
                 for r in range(rounds))


def count_floor(plan: KMeansPlan, round_index: int, participants: int) -> float:
    """Public floor under which a summed noisy count keeps the previous centroid:
    twice the standard deviation of the summed count noise (``sqrt(2 p) / eps_counts``),
    and at least 1."""
    eps_counts = float(plan.budgets()[round_index][0])
    return max(1.0, 2.0 * math.sqrt(2.0 * participants) / eps_counts)
