"""Poisoning bounds of cohort releases and overflow-checked sums, from public parameters only.

An honest entry of a cohort round is its exact value, clipped into the public range
``[low, high]`` of its :class:`~common.cohorts.mechanism.Part` (the record bound ``R`` times
one record's contribution: ``[0, R]`` for every count and histogram interval, ``[R min(lo_u,
0), R max(hi_u, 0)]`` for a k-means coordinate sum in grid units), plus one noise draw. So
every honest entry lies in ``[low - t, high + t]`` where ``t`` bounds the draw's magnitude
with probability ``1 - beta / size`` (:mod:`common.noise.tails`: discrete Laplace of the
part's scale, or the discrete Gaussian, which is sub-Gaussian with variance proxy
``scale**2``: Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy",
NeurIPS 2020, so the Gaussian Chernoff tail holds). By the union bound over the ``size``
entries an honest release is refused with probability at most ``beta`` (default ``2**-40``).

What this cannot catch: a participant that lies *within* the range (moves mass between
intervals, or reports up to ``R`` records it does not have). Without input-validity proofs
(Prio-style) no aggregation can tell that from real data.

Sums. :func:`checked_sum` adds ``r`` releases, each inside its bounds, in int64. With
``B = max |bound|`` every partial sum has magnitude at most ``r B``; the function refuses
(:class:`~common.errors.SumOverflow`) unless ``r B <= 2**63 - 1``, so the int64 sum cannot
wrap, and checks each release against the bounds and the result against ``r B`` again.
The coordinator's float64 post-processing then stays finite: every summed entry is below
``2**63`` in magnitude; k-means divides sums by counts above a floor of at least 1 and
clips to the box, and fusion averages finite centres with weights whose total is below
``n_c 2**63``; the DPM tree compares and cumulates at most 10^6 entries (below ``2**83``)
and averages interval midpoints with non-negative weights of positive total. A stored state
or model is checked again (:meth:`~common.cohorts.protocol.CohortState.to_json` and
:class:`~common.cohorts.model.CohortModel` refuse NaN and infinity).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from common.cohorts.mechanism import Part, RoundMechanism
from common.errors import ReleaseOutOfBounds, SumOverflow
from common.noise.tails import FAILURE_PROBABILITY, gaussian_tail, laplace_tail

__all__ = ["INT64_MAX", "ReleaseBounds", "checked_sum", "noise_tail", "release_bounds"]

INT64_MAX = 2**63 - 1
Ints = NDArray[np.int64]


def noise_tail(part: Part, beta: float) -> int:
    """An integer ``t`` with ``P(|noise| > t) <= beta`` for one entry of ``part``."""
    if part.noise == "gaussian":
        return math.ceil(gaussian_tail(part.scale, beta=beta))
    return laplace_tail(part.scale, beta=beta)


class ReleaseBounds:
    """Per entry, the range ``[lower, upper]`` an honest release of a round lies in.

    Raises ``ValueError`` when the mechanism states no record bound (no ``low``/``high``).
    """

    def __init__(self, mechanism: RoundMechanism, beta: float = FAILURE_PROBABILITY) -> None:
        per_entry = beta / max(1, mechanism.size)
        self.parts = mechanism.parts
        lows: list[Ints] = [np.zeros(0, np.int64)]
        highs: list[Ints] = [np.zeros(0, np.int64)]
        largest = 0
        for part in mechanism.parts:
            if part.low is None or part.high is None:
                raise ValueError(f"{part.name}: no public record bound to check against")
            t = noise_tail(part, per_entry)
            if part.size:  # exact Python ints: checked before any int64 arithmetic
                largest = max(largest, t - int(np.min(part.low)), int(np.max(part.high)) + t)
            if largest > INT64_MAX:
                raise ValueError(f"an honest release may hold {largest}, past int64; lower "
                                 "max_records or resolution_bits")
            lows.append(np.broadcast_to(part.low, (part.size,)) - t)
            highs.append(np.broadcast_to(part.high, (part.size,)) + t)
        self.largest = largest
        """The largest magnitude any honest entry can have (an exact int)."""
        self.lower: Ints = np.concatenate(lows).astype(np.int64)
        self.upper: Ints = np.concatenate(highs).astype(np.int64)

    def check(self, values: ArrayLike, what: str = "the release") -> None:
        """Refuse (:class:`~common.errors.ReleaseOutOfBounds`) a vector of the wrong length or
        with any entry outside its bound; the message names the first such entry."""
        v = np.asarray(values, dtype=np.int64)
        if v.shape != self.lower.shape:
            raise ReleaseOutOfBounds(f"{what} has {v.size} values, the round takes "
                                     f"{self.lower.size} values")
        bad = np.flatnonzero((v < self.lower) | (v > self.upper))
        if bad.size:
            i = int(bad[0])
            offset, name = i, ""
            for part in self.parts:
                if offset < part.size:
                    name = part.name
                    break
                offset -= part.size
            raise ReleaseOutOfBounds(
                f"{what}: value {int(v[i])} at index {i} ({name}, entry {offset}) is outside "
                f"[{int(self.lower[i])}, {int(self.upper[i])}], the public bound (record bound "
                f"times one record's contribution plus the noise tail at 2^-40); "
                f"{bad.size} value(s) out of bounds", index=i, value=int(v[i]),
                lower=int(self.lower[i]), upper=int(self.upper[i]))


def release_bounds(mechanism: RoundMechanism, beta: float = FAILURE_PROBABILITY
                   ) -> ReleaseBounds:
    """The honest range of every entry of a round (see the module docstring)."""
    return ReleaseBounds(mechanism, beta)


def checked_sum(releases: Sequence[ArrayLike], bounds: ReleaseBounds) -> Ints:
    """The int64 sum of ``releases``, each checked against ``bounds``; refuses
    (:class:`~common.errors.SumOverflow`) when ``len(releases) * bounds.largest`` could pass
    int64, so no partial sum can wrap. An empty sequence is refused too."""
    if not releases:
        raise SumOverflow("no releases to sum")
    if len(releases) * bounds.largest > INT64_MAX:
        raise SumOverflow(f"{len(releases)} releases of magnitude up to {bounds.largest} could "
                          "pass int64; nothing was summed")
    vectors = [np.asarray(r, dtype=np.int64) for r in releases]
    for i, v in enumerate(vectors):
        bounds.check(v, f"release {i + 1} of {len(vectors)}")
    total = np.sum(vectors, axis=0, dtype=np.int64)
    if int(np.max(np.abs(total), initial=0)) > len(vectors) * bounds.largest:
        raise SumOverflow("the sum left its proven range (an int64 wrap); nothing was summed")
    return np.asarray(total, dtype=np.int64)
