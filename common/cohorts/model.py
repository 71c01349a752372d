"""The released cohort model: what a private clustering hands back to every participant.

Both cohort mechanisms (federated DP k-means with fusion, :mod:`common.cohorts.kmeans`, and
the DPM cohort tree) end in the same object: ``k`` centres and their noisy sizes, computed
from released (noisy, summed) statistics only, plus, for the tree, the readable rule path
of each leaf. The centroid detector, the participant's score files, ``fedod-participant
cohorts`` and the dashboard all read this object; none of them sees a record of another
participant.

Distances are measured in the study's public unit box: every feature is mapped with the
public bounds to ``(x - lo) / (hi - lo)`` (and clipped to ``[0, 1]``) before the Euclidean
distance is taken, so a feature's range does not decide its weight.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

Floats = NDArray[np.float64]


@dataclass(frozen=True)
class Condition:
    """One split on a rule path: ``x[feature] < threshold`` (``above=False``) or ``>=``."""

    feature: int
    threshold: float
    above: bool

    def describe(self, names: list[str] | None = None) -> str:
        """``"age >= 61.5"``; feature names default to ``x0, x1, ...``."""
        name = names[self.feature] if names else f"x{self.feature}"
        return f"{name} {'>=' if self.above else '<'} {self.threshold:.6g}"


@dataclass(frozen=True)
class CohortModel:
    """``k`` private cohorts: centres (feature units), noisy sizes (clamped at 0), rules.

    Parameters
    ----------
    centroids : (k, d) array, in the features' own units.
    masses : (k,) array of released sizes (summed noisy counts, negatives clamped to 0).
    lo, hi : (d,) public bounds of the study schema (never data-derived).
    rules : per cohort, the conditions from the root to its leaf (DPM tree); empty for
        k-means cohorts.
    """

    centroids: Floats
    masses: Floats
    lo: Floats
    hi: Floats
    rules: tuple[tuple[Condition, ...], ...] = field(default=())

    def __post_init__(self) -> None:
        c = np.asarray(self.centroids, dtype=np.float64)
        m = np.clip(np.asarray(self.masses, dtype=np.float64), 0.0, None)
        lo = np.asarray(self.lo, dtype=np.float64)
        hi = np.asarray(self.hi, dtype=np.float64)
        if c.ndim != 2 or c.shape[0] == 0:
            raise ValueError(f"centroids must be a non-empty (k, d) array, got {c.shape}")
        k, d = c.shape
        if m.shape != (k,):
            raise ValueError(f"masses must have shape ({k},), got {m.shape}")
        if lo.shape != (d,) or hi.shape != (d,) or not np.all(hi > lo):
            raise ValueError("lo and hi must be (d,) public bounds with hi > lo")
        if self.rules and len(self.rules) != k:
            raise ValueError(f"rules must be empty or one path per cohort ({k}), "
                             f"got {len(self.rules)}")
        if not (np.all(np.isfinite(c)) and np.all(np.isfinite(m))):
            raise ValueError("centroids and masses must be finite")
        for name, value in (("centroids", c), ("masses", m), ("lo", lo), ("hi", hi)):
            value.setflags(write=False)
            object.__setattr__(self, name, value)

    @property
    def k(self) -> int:
        """Number of cohorts."""
        return int(self.centroids.shape[0])

    def unit(self, X: ArrayLike) -> Floats:
        """Map records (or centres) into the public unit box, clipped to ``[0, 1]``."""
        x = np.asarray(X, dtype=np.float64)
        return np.clip((x - self.lo) / (self.hi - self.lo), 0.0, 1.0)

    def assign(self, X: ArrayLike) -> tuple[NDArray[np.intp], Floats]:
        """Each record's nearest cohort (ties to the lower index) and its unit-box distance."""
        x = self.unit(np.atleast_2d(np.asarray(X, dtype=np.float64)))
        c = self.unit(self.centroids)
        d2 = (x * x).sum(axis=1)[:, None] - 2.0 * x @ c.T + (c * c).sum(axis=1)[None, :]
        index = np.argmin(d2, axis=1)
        dist = np.sqrt(np.clip(d2[np.arange(len(x)), index], 0.0, None))
        return index.astype(np.intp), dist

    def describe(self, cohort: int, names: list[str] | None = None) -> str:
        """The rule path of one cohort as text (k-means cohorts have none: nearest centre)."""
        if not self.rules:
            return f"cohort {cohort} (nearest centre)"
        if not self.rules[cohort]:
            return "all records"
        return " and ".join(cond.describe(names) for cond in self.rules[cohort])

    def to_json(self) -> str:
        """A JSON text that :meth:`from_json` reads back exactly (floats as repr)."""
        return json.dumps({
            "centroids": self.centroids.tolist(), "masses": self.masses.tolist(),
            "lo": self.lo.tolist(), "hi": self.hi.tolist(),
            "rules": [[[c.feature, c.threshold, c.above] for c in path] for path in self.rules],
        })

    @classmethod
    def from_json(cls, text: str) -> CohortModel:
        """Read :meth:`to_json` output; raises ``ValueError`` on anything malformed."""
        try:
            raw: dict[str, Any] = json.loads(text)
            rules = tuple(tuple(Condition(int(f), float(t), bool(a)) for f, t, a in path)
                          for path in raw.get("rules", []))
            return cls(np.asarray(raw["centroids"], dtype=np.float64),
                       np.asarray(raw["masses"], dtype=np.float64),
                       np.asarray(raw["lo"], dtype=np.float64),
                       np.asarray(raw["hi"], dtype=np.float64), rules)
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a cohort model: {exc}") from exc
