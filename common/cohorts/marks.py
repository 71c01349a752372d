"""Which released cohort centres are findings and which are artefacts, from public values only.

A released cohort can look like a finding and be none:

- **noise**: its released (noisy, summed) size is within ``NOISE_SDS`` standard deviations of
  the summed count noise, so the count, and the centre computed from the same noisy
  statistics, says more about the noise than about records. The standard deviation is public:
  it follows from the signed epsilon split and the number of participants that released the
  last round (each adds its own discrete Laplace draw of scale ``1 / eps_counts``).
- **unmoved**: its centre equals its public start, so no round moved it: for k-means, one of
  the seed-drawn start centroids (:func:`common.cohorts.kmeans.initial_centroids`, from the
  signed seed); for the DPM tree, the middle of its leaf's rule box (where a leaf centre falls
  back when its histograms are under the noise floor).
- **corner**: every coordinate sits on a bound of the public box: the update divides noisy
  sums by a small noisy count and clips the result to the box.

The rule (:func:`mark_centres`) reads the released model, the public noise figure and the
public starts; never a record or a statistic of one. Marking is post-processing: it costs no
privacy. ``NOISE_SDS = 2`` is the k-means count floor's own threshold
(:func:`common.cohorts.plan.count_floor`): a centroid under it is not moved by a round.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from common.cohorts.dpm_protocol import DPMProtocol
from common.cohorts.model import CohortModel
from common.cohorts.protocol import KMeansProtocol, RoundProtocol
from common.noise.scale import discrete_laplace_sd

__all__ = ["NOISE_SDS", "CentreMark", "count_noise_sd", "last_round_senders",
           "mark_centres", "marks_of", "marks_of_public", "public_starts"]

NOISE_SDS = 2.0
"""A released size at or under this many standard deviations of its noise is marked noise."""

_TEXT = {
    "noise": "size within the noise",
    "unmoved": "never moved from its start",
    "corner": "at a corner of the study's box",
}


@dataclass(frozen=True)
class CentreMark:
    """What is wrong with one released cohort (all False: nothing known to be wrong)."""

    noise: bool
    unmoved: bool
    corner: bool

    @property
    def flags(self) -> tuple[str, ...]:
        """The short names of the marks set, in a fixed order (``noise``, ``unmoved``, ...)."""
        return tuple(name for name in _TEXT if getattr(self, name))

    @classmethod
    def from_flags(cls, flags: list[str] | tuple[str, ...]) -> CentreMark:
        """The mark whose :attr:`flags` are ``flags`` (as the API carries them)."""
        unknown = set(flags) - set(_TEXT)
        if unknown:
            raise ValueError(f"unknown cohort marks: {sorted(unknown)}")
        return cls(*(name in flags for name in _TEXT))

    def describe(self) -> str:
        """``"not a finding: size within the noise; never moved from its start"`` or ``""``."""
        return "not a finding: " + "; ".join(_TEXT[f] for f in self.flags) if self.flags else ""


def mark_centres(model: CohortModel, count_sd: float, starts: ArrayLike | None = None, *,
                 aligned: bool = False, sds: float = NOISE_SDS) -> tuple[CentreMark, ...]:
    """Mark each cohort of ``model`` (in model order) from public values only.

    ``count_sd``: standard deviation of the noise in one released size (:func:`count_noise_sd`).
    ``starts``: public start points in feature units, shape ``(m, d)`` (k-means: the seed
    centroids: a centre equal to any row is unmoved) or, with ``aligned``, ``(k, d)``, one
    start per cohort (DPM: :func:`public_starts`; only a centre's own start counts). None: no
    starts are known.
    """
    if not math.isfinite(count_sd) or count_sd < 0:
        raise ValueError(f"count_sd must be a finite figure >= 0, got {count_sd!r}")
    cents = model.unit(model.centroids)
    tol = 1e-9
    if starts is None:
        moved = np.ones(model.k, dtype=bool)
    else:
        s = model.unit(np.atleast_2d(np.asarray(starts, dtype=np.float64)))
        if s.shape[1] != cents.shape[1]:
            raise ValueError(f"starts must have {cents.shape[1]} columns, got {s.shape}")
        if aligned and s.shape[0] != model.k:
            raise ValueError(f"aligned starts need one row per cohort ({model.k}), got {s.shape}")
        gap = np.abs(cents[:, None, :] - s[None, :, :]).max(axis=2)
        moved = ~(np.diagonal(gap) <= tol if aligned else (gap <= tol).any(axis=1))
    corner = np.all((cents <= tol) | (cents >= 1.0 - tol), axis=1)
    noise = np.asarray(model.masses, dtype=np.float64) <= sds * count_sd
    return tuple(CentreMark(bool(noise[i]), bool(not moved[i]), bool(corner[i]))
                 for i in range(model.k))


def count_noise_sd(count_epsilon: float, participants: int) -> float:
    """Standard deviation of a sum of ``participants`` discrete Laplace draws of scale
    ``1 / count_epsilon`` (a released count has sensitivity 1)."""
    if count_epsilon <= 0 or participants < 1:
        raise ValueError("count_epsilon must be > 0 and participants >= 1")
    return math.sqrt(participants) * discrete_laplace_sd(1.0 / count_epsilon)


def public_starts(protocol: RoundProtocol, model: CohortModel) -> np.ndarray | None:
    """The public start points of a run: k-means' seed centroids (``protocol.start()``), or
    for the DPM tree, each leaf's rule-box middle (aligned with the model's cohorts)."""
    if isinstance(protocol, KMeansProtocol):
        return np.asarray(protocol.start().data["centroids"], dtype=np.float64)
    if not model.rules:
        return None
    low = np.tile(model.lo, (model.k, 1))
    high = np.tile(model.hi, (model.k, 1))
    for i, path in enumerate(model.rules):
        for cond in path:
            if cond.above:
                low[i, cond.feature] = max(low[i, cond.feature], cond.threshold)
            else:
                high[i, cond.feature] = min(high[i, cond.feature], cond.threshold)
    return np.asarray((low + high) / 2.0)


def marks_of(protocol: RoundProtocol, model: CohortModel,
             participants: int) -> tuple[CentreMark, ...]:
    """Marks of a finished run: the count noise of its last round's ``participants``
    releases (the k-means counts of the last Lloyd round, or the DPM leaf counts) and its
    public starts (for the DPM tree, each cohort's own)."""
    if isinstance(protocol, KMeansProtocol):
        eps = float(protocol.plan.budgets()[-1][0])
    elif isinstance(protocol, DPMProtocol):
        eps = float(protocol.plan.budgets().leaf_counts)
    else:
        raise ValueError(f"no marking rule for {type(protocol).__name__}")
    starts = public_starts(protocol, model)
    return mark_centres(model, count_noise_sd(eps, max(1, participants)), starts,
                        aligned=isinstance(protocol, DPMProtocol))


def last_round_senders(history: list[dict[str, Any]]) -> int:
    """How many releases the run's last usable round summed, from the public round history
    (``CohortsPublic.history``: the last ``done`` round's ``sent`` list)."""
    done = [r for r in history if r.get("status") == "done"]
    return len(done[-1].get("sent", [])) if done else 1


def marks_of_public(protocol: RoundProtocol, doc: dict[str, Any]) -> tuple[CentreMark, ...]:
    """Marks of the model in a ``GET /v1/studies/{id}/cohorts`` answer (``CohortsPublic``);
    ``()`` when no model is released yet."""
    if doc.get("status") != "done" or doc.get("model") is None:
        return ()
    model = CohortModel.from_json(json.dumps(doc["model"]))
    return marks_of(protocol, model, last_round_senders(list(doc.get("history") or [])))
