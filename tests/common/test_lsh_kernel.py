"""The fast scoring kernel gives exactly the family's bucket indices and scores."""

from __future__ import annotations

import numpy as np
import pytest

from common.detectors import LSHiTables
from common.detectors.lsh_itables import column_bounds
from common.detectors.lsh_kernel import FastScorer, _ranker, scorer
from common.histograms.hashing import LSHFamily, derive_lsh_family


def _awkward_rows(family: LSHFamily, lo: np.ndarray, hi: np.ndarray, n: int,
                  rng: np.random.Generator) -> np.ndarray:
    """Rows beyond the bounds, with ties, values exactly at cuts and at the bounds."""
    X = rng.uniform(lo - 0.5, hi + 0.5, (n, lo.shape[0]))
    X[:, 0] = np.round(X[:, 0], 1)  # ties among values
    for j in range(family.n_tables):  # values exactly at cuts (x >= c is a 1)
        for k in range(int(family.n_bits[j])):
            X[(j * 7 + k) % n, family.features[j, k]] = family.cuts[j, k]
    X[-1] = lo
    X[-2] = hi
    return X


@pytest.mark.parametrize(("d", "m", "s"), [(3, 100, 1000), (10, 100, 1000), (3, 25, 16),
                                           (2, 7, 4096), (1, 30, 1000), (5, 60, 256)])
def test_flat_indices_match_the_family(d: int, m: int, s: int) -> None:
    rng = np.random.default_rng(d * m)
    lo, hi = -rng.random(d), 1 + rng.random(d)
    family = derive_lsh_family(b"kernel", lo, hi, m, s)
    fast = scorer(family)
    assert isinstance(fast, FastScorer)
    X = _awkward_rows(family, lo, hi, 5000, rng)
    expected = family.flat_index(X)
    got = np.vstack([block for _, block in fast.flat_blocks(X)])
    np.testing.assert_array_equal(got.astype(np.int64), expected)
    small = np.vstack([b.copy() for _, b in fast.iter_flat_blocks(X, 333)])  # odd blocks
    np.testing.assert_array_equal(small.astype(np.int64), expected)


def test_features_whose_cuts_buckets_cannot_separate_fall_back_exactly() -> None:
    """Cuts closer than any uniform bucket table can split go through np.searchsorted."""
    lo, hi = np.array([0.0, -1.0, 0.0]), np.array([1.0, 1.0, 2.0])
    near = 0.5 + np.array([0.0, 1e-15, 2e-15, 0.25])
    features = np.array([[0, 0, 1, 2], [0, 0, 2, 1], [1, 2, 1, 0]], dtype=np.int32)
    cuts = np.array([[near[0], near[1], 0.1, 1.5], [near[2], near[3], 0.3, -0.2],
                     [0.7, 0.2, -0.9, 0.9]])
    n_bits = np.array([4, 4, 3], dtype=np.int32)
    cuts[2, 3] = np.inf  # unused slot
    offsets = np.concatenate([[0], np.cumsum(1 << n_bits.astype(np.int64))])
    family = LSHFamily(lo=lo, hi=hi, features=features, cuts=cuts, n_bits=n_bits,
                       offsets=offsets)
    fast = FastScorer(family)
    assert fast.slow  # feature 0 cannot be bucketed
    assert _ranker(np.sort(near[:3]), 0.0, 1.0, 0) is None
    rng = np.random.default_rng(3)
    X = _awkward_rows(family, lo, hi, 2000, rng)
    X[:50, 0] = near[rng.integers(0, 4, 50)] + rng.choice([-1e-16, 0.0, 1e-16], 50)
    got = np.vstack([block for _, block in fast.flat_blocks(X)])
    np.testing.assert_array_equal(got.astype(np.int64), family.flat_index(X))


@pytest.mark.parametrize("scoring", ["log", "mass"])
def test_detector_scores_are_bit_identical_to_the_reference_path(scoring: str) -> None:
    """Same reduction as ``np.take(cell_scores, flat_index).sum(axis=1)``, bit for bit."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(9000, 5))
    X[::7] *= 3
    det = LSHiTables(random_state=1, scoring=scoring).fit(X)  # type: ignore[arg-type]
    reference = np.take(det.cell_scores_, det.family_.flat_index(X)).sum(axis=1)
    reference *= -1.0 / det.family_.n_tables
    np.testing.assert_array_equal(det.decision_function(X), reference)


def test_column_bounds_equal_numpy_min_max() -> None:
    rng = np.random.default_rng(8)
    for n in (1, 63, 64, 65, 1000):
        X = rng.normal(size=(n, 7))
        for arr in (X, np.asfortranarray(X), X[:, ::2]):
            lo, hi = column_bounds(arr)
            np.testing.assert_array_equal(lo, arr.min(axis=0))
            np.testing.assert_array_equal(hi, arr.max(axis=0))


def test_bounds_too_close_for_bucket_arithmetic_fall_back_exactly() -> None:
    """A range so narrow that ``K / (hi - lo)`` overflows is ranked by np.searchsorted
    (with a single cut there is no pair of buckets to tell that the arithmetic failed)."""
    lo, hi = np.array([0.0, -1.0]), np.array([5e-324, 1.0])
    features = np.array([[0, 1], [1, 1]], dtype=np.int32)
    cuts = np.array([[0.0, 0.25], [-0.5, 0.5]])
    n_bits = np.array([2, 2], dtype=np.int32)
    offsets = np.array([0, 4, 8], dtype=np.int64)
    family = LSHFamily(lo=lo, hi=hi, features=features, cuts=cuts, n_bits=n_bits,
                       offsets=offsets)
    fast = FastScorer(family)
    assert fast.slow
    X = np.array([[0.0, 0.0], [5e-324, 0.3], [-1.0, -0.6], [1.0, 1.0], [1e-300, -0.5]])
    got = np.vstack([block for _, block in fast.flat_blocks(X)])
    np.testing.assert_array_equal(got.astype(np.int64), family.flat_index(X))
