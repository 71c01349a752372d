"""Public parameters, exact budget split and JSON tree state of the federated DPM tree.

Everything here is public (signed config or released values): the box, the number of
intervals per feature, the depth, the budget split, and the tree grown so far (each leaf's
rule path and its support in interval units). Nothing in this module reads a record; see
:mod:`common.cohorts.dpm` for the mechanism and its sensitivity.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from decimal import ROUND_FLOOR, Decimal
from typing import Any

import numpy as np
from numpy.typing import NDArray

from common.budget import EPSILON_QUANTUM, PrivacyBudget
from common.histograms.seeded import as_bounds
from common.noise.scale import discrete_laplace_sd

__all__ = ["DPMBudget", "DPMPlan", "Leaf", "TreeState", "node_dims", "tree_state"]

Floats = NDArray[np.float64]
_DIMS_TAG = b"fedod-dpm-dims/1\x00"


@dataclass(frozen=True)
class DPMBudget:
    """Per-participant epsilon of each tree level, of the leaf counts and leaf histograms."""

    levels: tuple[Decimal, ...]
    leaf_counts: Decimal
    leaf_histograms: Decimal
    leaf_delta: Decimal = Decimal(0)
    """delta of the leaf histograms: 0 under Laplace, ``1 / (n sqrt n)`` under Gaussian."""

    @property
    def total(self) -> Decimal:
        """Basic composition of every part: equals the plan's epsilon exactly."""
        return sum(self.levels, Decimal(0)) + self.leaf_counts + self.leaf_histograms


@dataclass(frozen=True, eq=False)
class DPMPlan:
    """The public parameters of one federated DPM study (all of them signed config).

    Attributes
    ----------
    lo, hi : (d,) float64
        The public box; records are clipped to it. Never taken from the data.
    epsilon : Decimal | int | str
        Each participant's total epsilon over all levels and the leaf release.
    depth : int, default 5
        Tree levels ``L`` (at most ``2**L`` leaves); 4-5 suits hospital-scale data.
    bins : int, default 64
        Public intervals per feature: interval ``i`` of feature ``j`` is
        ``[lo_j + i w_j, lo_j + (i + 1) w_j)`` with ``w_j = (hi_j - lo_j) / bins``.
    dims_per_node : int | None, default 4
        Features histogrammed per node and level (a public, seed-chosen subset: the L1
        sensitivity of a level); ``None`` means every feature.
    participants : int, default 1
        How many participants add their own noise to each sum (sets the noise floor).
    leaf_share, count_share : Decimal | str
        Fraction of epsilon for the leaf release; of that, the fraction for the counts.
    floor_sd : float, default 3.0
        An interval counts as occupied when its summed noisy count exceeds ``floor_sd``
        standard deviations of the summed noise.
    min_size : int, default 10
        Public minimum (noisy) size of each side of a split and of a released cohort; the
        noise floor's ``2 x`` threshold applies when larger. Without it a low noise floor
        lets a split cut a few tail records off a cluster.
    leaf_noise : "laplace" | "gaussian", default "laplace"
        Noise on the leaf histograms: discrete Laplace at L1 sensitivity ``d`` (pure
        epsilon), or the discrete Gaussian at L2 sensitivity ``sqrt(d)``, charged as
        ``(epsilon, delta)`` (:mod:`common.noise.gaussian`).
    declared_n : int | None
        Gaussian only (required there): the declared, public number of records of the
        whole study; ``delta = 1 / (n sqrt n)``. Never counted from the data.
    """

    lo: Floats
    hi: Floats
    epsilon: Decimal | int | str
    depth: int = 5
    bins: int = 64
    dims_per_node: int | None = 4
    participants: int = 1
    leaf_share: Decimal | str = "0.4"
    count_share: Decimal | str = "0.2"
    floor_sd: float = 3.0
    min_size: int = 10
    leaf_noise: str = "laplace"
    declared_n: int | None = None

    def __post_init__(self) -> None:
        lo, hi = as_bounds(self.lo, self.hi)
        if not np.all(hi > lo):
            raise ValueError("every upper bound must be > its lower bound")
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)
        if self.dims_per_node is None:
            object.__setattr__(self, "dims_per_node", lo.size)
        for name, low, high in (("depth", 1, 30), ("bins", 2, 1 << 16),
                                ("dims_per_node", 1, lo.size), ("participants", 1, 1 << 20),
                                ("min_size", 0, 1 << 40)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
        if not (math.isfinite(self.floor_sd) and self.floor_sd > 0):
            raise ValueError(f"floor_sd must be positive, got {self.floor_sd!r}")
        if self.leaf_noise not in ("laplace", "gaussian"):
            raise ValueError(f"leaf_noise must be laplace or gaussian, got {self.leaf_noise!r}")
        if (self.leaf_noise == "gaussian") != (self.declared_n is not None):
            raise ValueError("declared_n is required with Gaussian leaf noise, and only there")
        self.budgets()

    @property
    def d(self) -> int:
        """Number of features."""
        return int(self.lo.size)

    @property
    def m(self) -> int:
        """Features histogrammed per node and level: the L1 sensitivity of one level."""
        return int(self.dims_per_node or self.d)

    @property
    def width(self) -> Floats:
        """Public interval width of each feature."""
        return np.asarray((self.hi - self.lo) / self.bins, dtype=np.float64)

    def budgets(self) -> DPMBudget:
        """Split ``epsilon`` exactly (1e-9 units): ``floor(units * leaf_share)`` to the leaves
        (of which ``floor(. * count_share)`` to the counts), the rest evenly over the levels
        (the first ``rest % depth`` levels take one unit more). Raises ``ValueError`` if any
        part would be zero."""
        total = PrivacyBudget(self.epsilon).epsilon
        units = int(total / EPSILON_QUANTUM)
        leaf = _share(units, self.leaf_share, "leaf_share")
        counts = _share(leaf, self.count_share, "count_share")
        rest = units - leaf
        levels = [rest // self.depth + (1 if i < rest % self.depth else 0)
                  for i in range(self.depth)]
        if min(levels + [counts, leaf - counts]) < 1:
            raise ValueError(f"epsilon {total} is too small to split over {self.depth} levels "
                             "and the leaf release")
        delta = Decimal(0)
        if self.declared_n is not None:
            from common.noise.gaussian import declared_delta

            delta = declared_delta(self.declared_n)
        return DPMBudget(tuple(u * EPSILON_QUANTUM for u in levels),
                         counts * EPSILON_QUANTUM, (leaf - counts) * EPSILON_QUANTUM, delta)

    def round_costs(self) -> tuple[PrivacyBudget, ...]:
        """What each round charges a participant, in order: the ``depth`` levels, then the
        leaf release (counts and histograms). A tree that stops early skips the remaining
        levels (the stop is decided on released values) and is charged for the rounds run."""
        budget = self.budgets()
        return tuple(PrivacyBudget(e) for e in budget.levels) + (
            PrivacyBudget(budget.leaf_counts + budget.leaf_histograms, budget.leaf_delta),)

    def histogram_sd(self) -> float:
        """Standard deviation of one participant's noise on a leaf histogram interval (the
        discrete Gaussian's is at most its scale)."""
        budget = self.budgets()
        if self.leaf_noise == "gaussian":
            from common.noise.gaussian import histogram_scale

            return histogram_scale(self.d, budget.leaf_histograms, budget.leaf_delta)
        return discrete_laplace_sd(self.d / float(budget.leaf_histograms))

    def floor(self, sensitivity: int, epsilon: Decimal) -> float:
        """Noise floor: ``floor_sd`` standard deviations of ``participants`` summed discrete
        Laplace draws of scale ``sensitivity / epsilon``."""
        return self._floor(discrete_laplace_sd(sensitivity / float(epsilon)))

    def _floor(self, sd: float) -> float:
        return self.floor_sd * math.sqrt(self.participants) * sd

    def histogram_floor(self) -> float:
        """Noise floor of the summed leaf histograms (:meth:`histogram_sd`)."""
        return self._floor(self.histogram_sd())


def _share(units: int, share: Decimal | str, name: str) -> int:
    value = Decimal(str(share))
    if not value.is_finite() or not 0 < value < 1:
        raise ValueError(f"{name} must be in (0, 1), got {share!r}")
    return int((units * value).to_integral_value(ROUND_FLOOR))


@dataclass(frozen=True)
class Leaf:
    """One leaf of the public tree.

    ``conditions`` are ``(feature, edge, above)``: interval index ``>= edge`` when ``above``,
    else ``< edge``. ``support`` is ``(first, stop)`` in interval units per feature: records
    of the leaf are clipped into it before they are histogrammed. ``active`` leaves are
    histogrammed at the next level; the others are final.
    """

    path: str
    conditions: tuple[tuple[int, int, bool], ...]
    support: tuple[tuple[int, int], ...]
    active: bool = True


@dataclass(frozen=True)
class TreeState:
    """The public state between rounds: the seed, the next level and the leaves in order."""

    seed: bytes
    level: int
    leaves: tuple[Leaf, ...] = field(default=())

    @property
    def active(self) -> tuple[Leaf, ...]:
        """Leaves histogrammed at the next level."""
        return tuple(leaf for leaf in self.leaves if leaf.active)

    def to_json(self) -> str:
        """JSON text read back exactly by :meth:`from_json`."""
        return json.dumps({"seed": self.seed.hex(), "level": self.level, "leaves": [
            {"path": leaf.path, "conditions": [list(c) for c in leaf.conditions],
             "support": [list(s) for s in leaf.support], "active": leaf.active}
            for leaf in self.leaves]})

    @classmethod
    def from_json(cls, text: str) -> TreeState:
        """Read :meth:`to_json` output; raises ``ValueError`` on anything malformed."""
        try:
            raw: dict[str, Any] = json.loads(text)
            leaves = tuple(Leaf(str(x["path"]),
                                tuple((int(f), int(e), bool(a)) for f, e, a in x["conditions"]),
                                tuple((int(a), int(b)) for a, b in x["support"]),
                                bool(x["active"])) for x in raw["leaves"])
            return cls(bytes.fromhex(raw["seed"]), int(raw["level"]), leaves)
        except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a DPM tree state: {exc}") from exc

    def finished(self, plan: DPMPlan) -> bool:
        """True once ``plan.depth`` levels ran or no leaf is active."""
        return self.level >= plan.depth or not self.active

    def close(self) -> TreeState:
        """The same tree with every leaf final."""
        return replace(self, leaves=tuple(replace(leaf, active=False) for leaf in self.leaves))


def tree_state(plan: DPMPlan, seed: bytes) -> TreeState:
    """The root: one active leaf, no conditions, the whole public box as support."""
    if not isinstance(seed, bytes) or not seed:
        raise ValueError("seed must be non-empty bytes")
    root = Leaf("", (), tuple((0, plan.bins) for _ in range(plan.d)))
    return TreeState(seed, 0, (root,))


def node_dims(plan: DPMPlan, seed: bytes, path: str, level: int) -> tuple[int, ...]:
    """The ``plan.m`` features histogrammed for leaf ``path`` at ``level``, chosen from the
    public seed only: features sorted by ``sha256("fedod-dpm-dims/1\\0" || len(seed) u32 ||
    seed || level u32 || path || "\\0" || feature u32)``, first ``m`` kept, in feature order."""
    if plan.m >= plan.d:
        return tuple(range(plan.d))
    key = _DIMS_TAG + len(seed).to_bytes(4, "little") + seed + level.to_bytes(4, "little")
    key += path.encode() + b"\x00"
    order = sorted(range(plan.d),
                   key=lambda j: hashlib.sha256(key + j.to_bytes(4, "little")).digest())
    return tuple(sorted(order[:plan.m]))
