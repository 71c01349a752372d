"""Exact dataset-wide ranks of a vector held in parts, without the whole vector in one place.

:func:`common.detectors.combine.combine` ranks every record against the whole dataset: the
average rank of each detector's score (ties share the mean of their ranks; NaN sorts last,
each NaN its own rank, as numpy sorts) and the 1-based ordinal rank of the combined score
(descending, ties in dataset order). When the records lie in partitions on a cluster, the
same numbers come out of a sample sort over value ranges ("buckets"):

1. each part reduces its values to sorted distinct values with their counts (:func:`tally`,
   its one sort) and sends a small sorted sample of them (:func:`sample`); the cut points
   between buckets come from the pooled samples (:func:`cut_points`);
2. each part groups its entries by bucket (:func:`bounds`; :func:`bucket_records` is how
   many records each bucket holds);
3. each bucket merges the entries of every part that fall into it (:func:`resolve`): for
   each part's entry, how many values of the whole dataset are smaller (``start``), how many
   are smaller or equal (``end``) and how many equal ones lie in earlier parts
   (``before``);
4. each part maps those back to its records (:func:`average_ranks_of`,
   :func:`ordinal_ranks_of`).

Only samples, per-bucket counts and the resolved entries move between parts and buckets; a
bucket holds the distinct values of its range (heavy ties collapse into one entry), never the
dataset. Counts are int64, so the ranks are the exact numbers :func:`combine` computes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

Floats = NDArray[np.float64]
Ints = NDArray[np.int64]
ENTRY = np.dtype([("value", "<f8"), ("count", "<i8")])
"""A part's distinct value and how many of its records hold it."""
RESOLVED = np.dtype([("start", "<i8"), ("end", "<i8"), ("before", "<i8")])
"""For one entry: values smaller, values smaller or equal, equal values in earlier parts."""


def cut_points(samples: Sequence[tuple[Floats, int]], buckets: int) -> Floats:
    """Sorted distinct cut values for at most ``buckets`` value ranges of similar record counts.

    ``samples`` holds, per part, its :func:`sample` and how many non-NaN records it stands
    for. Bucket ``b`` holds the values ``v`` with ``cuts[b-1] <= v < cuts[b]``.
    """
    parts = [(s, n) for s, n in samples if s.size]
    if buckets <= 1 or not parts:
        return np.empty(0)
    values = np.concatenate([s for s, _ in parts])
    weights = np.concatenate([np.full(s.size, n / s.size) for s, n in parts])
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    targets = np.arange(1, buckets) * (cumulative[-1] / buckets)
    at = np.minimum(np.searchsorted(cumulative, targets), values.size - 1)
    return np.unique(values[order][at])


@dataclass(frozen=True)
class Tally:
    """One part's values as sorted distinct entries with their counts."""

    entries: NDArray[np.void]
    """:data:`ENTRY` rows, sorted by value."""
    inverse: NDArray[np.signedinteger]
    """For each non-NaN record (in record order), the index of its entry (int32 when it
    fits: 4 bytes per record held between the passes)."""
    nan: NDArray[np.bool_]
    """Which records are NaN (not in any bucket)."""

    @property
    def nan_count(self) -> int:
        return int(self.nan.sum())

    @property
    def finite_count(self) -> int:
        return self.inverse.size


def tally(x: Floats) -> Tally:
    """The distinct non-NaN values of ``x`` with their counts (the part's one sort)."""
    nan = np.isnan(x)
    values, inverse, counts = np.unique(x[~nan], return_inverse=True, return_counts=True)
    entries = np.empty(values.size, dtype=ENTRY)
    entries["value"], entries["count"] = values, counts
    index = np.int32 if values.size < 2**31 else np.int64
    return Tally(entries, inverse.reshape(-1).astype(index), nan)


def sample(t: Tally, size: int) -> Floats:
    """At most ``size`` of the part's non-NaN values, sorted, at evenly spaced ranks."""
    n = t.finite_count
    ranks = np.arange(n) if n <= size else (np.arange(size) * n) // size
    ends = np.cumsum(t.entries["count"])
    return np.asarray(t.entries["value"][np.searchsorted(ends, ranks, side="right")],
                      dtype=np.float64)


def bounds(t: Tally, cuts: Floats) -> Ints:
    """``t.entries[b[i]:b[i + 1]]`` fall into bucket ``i`` of the ``cuts``."""
    bucket = np.searchsorted(cuts, t.entries["value"], side="right")
    return np.searchsorted(bucket, np.arange(cuts.size + 2)).astype(np.int64)


def bucket_records(t: Tally, b: Ints) -> Ints:
    """How many of the part's records fall into each bucket of the bounds ``b``."""
    total = np.concatenate([[0], np.cumsum(t.entries["count"])])
    return np.diff(total[b]).astype(np.int64)


def resolve(pieces: Sequence[NDArray[np.void]], offset: int) -> list[NDArray[np.void]]:
    """:data:`RESOLVED` rows for each part's entries of one bucket (``pieces`` in part
    order); ``offset`` is the number of non-NaN records in all earlier buckets."""
    sizes = [p.size for p in pieces]
    values = np.concatenate([p["value"] for p in pieces]) if pieces else np.empty(0)
    counts = np.concatenate([p["count"] for p in pieces]) if pieces else np.empty(0, np.int64)
    distinct, inverse = np.unique(values, return_inverse=True)
    inverse = inverse.reshape(-1)
    totals = np.zeros(distinct.size, dtype=np.int64)
    np.add.at(totals, inverse, counts)
    ends = offset + np.cumsum(totals)
    starts = ends - totals
    running = np.zeros(distinct.size, dtype=np.int64)
    out, first = [], 0
    for size, piece in zip(sizes, pieces, strict=True):
        idx = inverse[first:first + size]  # distinct within one part
        first += size
        rows = np.empty(size, dtype=RESOLVED)
        rows["start"], rows["end"], rows["before"] = starts[idx], ends[idx], running[idx]
        running[idx] += piece["count"]
        out.append(rows)
    return out


def average_ranks_of(t: Tally, resolved: NDArray[np.void], nan_first: int) -> Floats:
    """The part's records' average ranks over the dataset (``resolved``: one row per entry,
    all buckets in order; ``nan_first``: the dataset's non-NaN count plus NaNs in earlier
    parts), as :func:`common.detectors.combine.average_ranks` gives them."""
    ranks = np.empty(t.nan.size, dtype=np.float64)
    ranks[~t.nan] = ((resolved["start"] + 1 + resolved["end"]) / 2.0)[t.inverse]
    ranks[t.nan] = nan_first + np.arange(1, t.nan_count + 1)
    return ranks


def ordinal_ranks_of(t: Tally, resolved: NDArray[np.void]) -> Ints:
    """1-based positions of the part's records in the dataset's stable ascending order."""
    if t.nan_count:
        raise ValueError("ordinal ranks need values without NaN")
    n = t.inverse.size
    order = np.argsort(t.inverse, kind="stable")
    first = np.cumsum(t.entries["count"]) - t.entries["count"]
    occurrence = np.empty(n, dtype=np.int64)
    occurrence[order] = np.arange(n) - np.repeat(first, t.entries["count"])
    base: Ints = np.asarray(resolved["start"] + resolved["before"], dtype=np.int64)
    out: Ints = base[t.inverse] + occurrence + 1
    return out
