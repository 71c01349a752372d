"""RF-LSH families: stable derivation from the seed, vectorised hashing, histograms."""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pytest

from common.histograms.hashing import LSHFamily, derive_lsh_family

SEED = bytes(range(32))
LO = [0.0, -1.0, 10.0]
HI = [1.0, 1.0, 20.0]
# Pinned: a numpy/Python upgrade or a code change that alters derivation must fail here,
# because participants on different versions would no longer share the hash functions.
GOLDEN_DIGEST = "47fa3a0e4ae41905423862143de1f481a76889ea95f828a8e9793c9db616b62f"


def family(**overrides: object) -> LSHFamily:
    args: dict[str, object] = {"seed": SEED, "lo": LO, "hi": HI, "n_tables": 5,
                               "sample_size": 1000}
    args.update(overrides)
    return derive_lsh_family(**args)  # type: ignore[arg-type]


def test_golden_digest() -> None:
    fam = family()
    assert fam.digest() == GOLDEN_DIGEST
    np.testing.assert_array_equal(fam.n_bits, [7, 4, 9, 9, 7])
    np.testing.assert_array_equal(fam.features[0], [2, 2, 0, 0, 1, 2, 1, 0, 0])


def test_stream_is_sha256_counter_mode() -> None:
    """The first draw of table 0 (``f``) is the documented 53-bit uniform of block 0."""
    key = (b"fedod-lsh-stream/1\x00" + struct.pack("<I", len(SEED)) + SEED
           + struct.pack("<IIQ", 3, 5, 1000))
    word = struct.unpack("<4Q", hashlib.sha256(key + (0).to_bytes(8, "little")).digest())[0]
    u = (word >> 11) * 2.0**-53
    s = 1000.0
    f = 1 / np.sqrt(s) + (1 - 2 / np.sqrt(s)) * u
    big_l = np.log(s) / np.log(max(2.0, 1 / f))
    assert 1 + 0.5 * big_l - 0.5 <= family().n_bits[0] <= big_l + 0.5


def test_derivation_independent_of_call_order() -> None:
    first = family().digest()
    other = family(seed=b"other", n_tables=7)
    np.random.seed(123)
    np.random.default_rng(5).random(10)
    assert family().digest() == first
    assert other.digest() == family(seed=b"other", n_tables=7).digest()


@pytest.mark.parametrize(
    "change",
    [{"seed": b"x"}, {"lo": [0.0, -1.0, 9.0]}, {"hi": [1.0, 2.0, 20.0]}, {"n_tables": 6},
     {"sample_size": 999}],
)
def test_digest_depends_on_every_input(change: dict[str, object]) -> None:
    assert family(**change).digest() != GOLDEN_DIGEST


@pytest.mark.parametrize("sample_size", [2, 4, 16, 64, 1000, 100_000])
def test_table_sizes_follow_the_paper(sample_size: int) -> None:
    fam = family(n_tables=200, sample_size=sample_size)
    big = np.log2(sample_size)
    assert fam.n_bits.min() >= 1
    assert fam.n_bits.max() <= np.floor(big + 0.5)
    np.testing.assert_array_equal(np.diff(fam.offsets), 2 ** fam.n_bits.astype(np.int64))
    assert fam.n_cells == fam.offsets[-1]
    assert fam.features.shape == fam.cuts.shape == (200, fam.n_bits.max())
    active = np.arange(fam.cuts.shape[1]) < fam.n_bits[:, None]
    lo, hi = np.asarray(LO)[fam.features], np.asarray(HI)[fam.features]
    assert np.all((fam.cuts >= lo)[active]) and np.all((fam.cuts <= hi)[active])
    assert np.all(np.isinf(fam.cuts[~active]))


@pytest.mark.parametrize(
    ("d", "sample_size"),
    [(3, 1000), (3, 100_000), (40, 16)],  # lookup tables (16- and 32-bit), per-bit path
)
def test_hash_matches_definition(d: int, sample_size: int) -> None:
    rng = np.random.default_rng(d)
    lo, hi = -rng.random(d), rng.random(d)
    fam = derive_lsh_family(SEED, lo, hi, 20, sample_size)
    X = rng.uniform(lo, hi, size=(5000, d))
    X[:20] = fam.cuts[np.arange(20), 0][:, None]  # rows exactly on cuts: x >= c sets the bit
    expected = np.zeros((5000, 20), dtype=np.int64)
    for j in range(20):
        for k in range(fam.n_bits[j]):
            expected[:, j] |= (X[:, fam.features[j, k]] >= fam.cuts[j, k]).astype(int) << k
    got = fam.hash(X)
    assert got.dtype == np.int64 and got.shape == (5000, 20)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(fam.flat_index(X), expected + fam.offsets[:-1])


def test_histogram_counts_every_record_once_per_table() -> None:
    fam = family(n_tables=30)
    X = np.random.default_rng(1).uniform(LO, HI, size=(40_000, 3))
    hist = fam.histogram(X)
    assert hist.shape == (fam.n_cells,) and hist.dtype == np.int64
    per_table = np.add.reduceat(hist, fam.offsets[:-1])
    np.testing.assert_array_equal(per_table, np.full(30, 40_000))


@pytest.mark.parametrize(
    ("X", "match"),
    [(np.zeros((2, 4)), "shape"), (np.zeros(3), "shape"), (np.array([[0.0, np.nan, 10.0]]),
                                                             "NaN")],
)
def test_hash_rejects_bad_input(X: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        family().hash(X)


@pytest.mark.parametrize(
    ("change", "match"),
    [({"seed": b""}, "seed"), ({"n_tables": 0}, "n_tables"), ({"sample_size": 1}, "sample_size"),
     ({"lo": [0.0, 2.0, 10.0]}, "lower bound"), ({"hi": [1.0, np.inf, 20.0]}, "finite"),
     ({"hi": [1.0, 1.0]}, "equal length")],
)
def test_derivation_rejects_bad_parameters(change: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        family(**change)


def test_family_arrays_are_read_only() -> None:
    fam = family()
    with pytest.raises(ValueError):
        fam.cuts[0, 0] = 0.5
