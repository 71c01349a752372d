"""Ranks of a vector held in parts (``common.detectors.ranks``) equal the ranks of the whole
vector, bit for bit: average ranks with ties and NaN, and stable ordinal ranks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.detectors import ranks
from common.detectors.combine import average_ranks, combine


def in_parts(x, splits, buckets, size=8):
    """Run the sample sort over ``x`` cut at ``splits``: every part's tally and its resolved
    rows (all buckets in order), and the NaN offset of each part, as the cluster would."""
    tallies = [ranks.tally(p) for p in np.split(x, splits)]
    samples = [(ranks.sample(t, size), t.finite_count) for t in tallies]
    cuts = ranks.cut_points(samples, buckets)
    bounds = [ranks.bounds(t, cuts) for t in tallies]
    per_bucket = np.sum([ranks.bucket_records(t, b)
                         for t, b in zip(tallies, bounds, strict=True)], axis=0)
    offsets = np.concatenate([[0], np.cumsum(per_bucket)])
    resolved = [[] for _ in tallies]
    for b in range(cuts.size + 1):
        pieces = [t.entries[bs[b]:bs[b + 1]] for t, bs in zip(tallies, bounds, strict=True)]
        for i, rows in enumerate(ranks.resolve(pieces, int(offsets[b]))):
            resolved[i].append(rows)
    nan_first = np.cumsum([int(offsets[-1])] + [t.nan_count for t in tallies])[:-1]
    return tallies, [np.concatenate(r) for r in resolved], nan_first


values = st.lists(st.sampled_from([0.0, -0.0, 1.5, 2.0, -3.0, np.nan, np.inf, -np.inf])
                  | st.floats(-10, 10), min_size=1, max_size=80)


@settings(deadline=None, max_examples=300)
@given(values, st.lists(st.integers(0, 80), max_size=5), st.integers(1, 9), st.integers(1, 9))
def test_average_ranks_in_parts_equal_the_whole(xs, splits, buckets, size):
    x = np.array(xs, dtype=np.float64)
    tallies, resolved, nan_first = in_parts(x, sorted(min(s, x.size) for s in splits), buckets,
                                            size)
    got = np.concatenate([ranks.average_ranks_of(t, r, int(f))
                          for t, r, f in zip(tallies, resolved, nan_first, strict=True)])
    assert got.tobytes() == average_ranks(x).tobytes()


@settings(deadline=None, max_examples=300)
@given(st.lists(st.integers(0, 6) | st.floats(0, 1), min_size=1, max_size=80),
       st.lists(st.integers(0, 80), max_size=5), st.integers(1, 9))
def test_ordinal_ranks_in_parts_equal_the_stable_order(xs, splits, buckets):
    combined = np.array(xs, dtype=np.float64)
    tallies, resolved, _ = in_parts(-combined, sorted(min(s, combined.size) for s in splits),
                                    buckets)
    got = np.concatenate([ranks.ordinal_ranks_of(t, r)
                          for t, r in zip(tallies, resolved, strict=True)])
    order = np.argsort(-combined, kind="stable")
    expected = np.empty(combined.size, dtype=np.int64)
    expected[order] = np.arange(1, combined.size + 1)
    assert got.tolist() == expected.tolist()


def test_the_combined_ranks_of_combine_come_out_of_the_passes():
    rng = np.random.default_rng(7)
    scores = {"a": rng.integers(0, 30, 5000).astype(float), "b": rng.normal(size=5000)}
    combined, rank = combine(scores, {"a": 1.0, "b": 3.0})
    splits = [0, 1200, 1201, 4000]  # an empty part and a one-record part
    tallies, resolved, _ = in_parts(-combined, splits, 7, size=64)
    got = np.concatenate([ranks.ordinal_ranks_of(t, r)
                          for t, r in zip(tallies, resolved, strict=True)])
    assert got.tolist() == rank.tolist()


def test_buckets_hold_similar_record_counts_and_ties_collapse():
    rng = np.random.default_rng(3)
    tallies = [ranks.tally(rng.uniform(size=4000)) for _ in range(10)]
    cuts = ranks.cut_points([(ranks.sample(t, 256), t.finite_count) for t in tallies], 10)
    per_bucket = np.sum([ranks.bucket_records(t, ranks.bounds(t, cuts)) for t in tallies],
                        axis=0)
    assert per_bucket.sum() == 40_000 and cuts.size == 9
    assert per_bucket.max() < 1.3 * 4000 and per_bucket.min() > 0.7 * 4000
    tied = np.where(rng.random(100_000) < 0.5, 1.0, rng.normal(size=100_000))
    t = ranks.tally(tied)
    heavy = int((tied == 1.0).sum())
    assert t.entries.size == tied.size - heavy + 1  # the tied half is one entry
    assert t.entries["count"][t.entries["value"] == 1.0].tolist() == [heavy]


def test_ordinal_ranks_refuse_nan():
    t = ranks.tally(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="NaN"):
        ranks.ordinal_ranks_of(t, ranks.resolve([t.entries], 0)[0])


@settings(deadline=None, max_examples=200)
@given(values, st.integers(1, 20))
def test_the_sample_is_the_sorted_values_at_evenly_spaced_ranks(xs, size):
    x = np.array(xs, dtype=np.float64)
    finite = np.sort(x[~np.isnan(x)])
    expected = finite if finite.size <= size else finite[(np.arange(size) * finite.size) // size]
    assert ranks.sample(ranks.tally(x), size).tolist() == expected.tolist()  # -0.0 == 0.0
