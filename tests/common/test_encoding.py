"""Count encoding round-trips, merging is an exact sum, and every corruption is refused."""

from __future__ import annotations

import base64
import hashlib
import json
import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from pydantic import ValidationError

from common.errors import PayloadInvalid, PayloadTooLarge
from common.histograms.cellkeys import ints_from_keys, key_words, keys_from_ints
from common.histograms.merge import merge_sparse, merge_sum
from common.noise.laplace import add_discrete_laplace
from common.wire.encoding import (
    EncodedCounts,
    check_counts,
    decode_counts,
    encode_counts,
    to_dense,
    validated_json,
)

I64 = np.iinfo(np.int64)
int_vectors = hnp.arrays(
    np.int64,
    st.integers(1, 300),
    elements=st.one_of(st.integers(-1000, 1000), st.integers(-(2**40), 2**40)),
)


@given(int_vectors, st.booleans())
def test_validated_json_is_the_model_json(values: np.ndarray, sparse: bool) -> None:
    """The stored text of validated counts parses back to the same model and holds the same
    JSON object as pydantic's serialisation (only the key order differs)."""
    n_cells = 2 * values.size
    indices = np.arange(0, n_cells, 2) if sparse else None
    enc = encode_counts(values, indices=indices, n_cells=n_cells if sparse else values.size)
    check_counts(enc, expected_cells=enc.n_cells)
    text = validated_json(enc)
    assert EncodedCounts.model_validate_json(text) == enc
    assert json.loads(text) == json.loads(enc.model_dump_json())


@given(int_vectors)
def test_dense_round_trip(values: np.ndarray) -> None:
    enc = encode_counts(values, n_cells=values.size)
    enc = EncodedCounts.model_validate_json(enc.model_dump_json())
    indices, decoded = decode_counts(enc, expected_cells=values.size)
    assert indices is None
    np.testing.assert_array_equal(decoded, values)
    fits32 = values.min() >= -(2**31) and values.max() < 2**31  # int32's range, both ends
    assert enc.dtype == ("<i4" if fits32 else "<i8")


@given(st.data(), st.one_of(st.integers(1, 10_000), st.integers(1, 2**2000)))
def test_sparse_round_trip(data: st.DataObject, n_cells: int) -> None:
    """Keys of any width (one 63-bit word up to 10,000 cells, several beyond) round-trip."""
    cells = sorted(data.draw(st.sets(st.integers(0, n_cells - 1), max_size=50)))
    idx = keys_from_ints(cells, key_words(n_cells))
    vals = data.draw(hnp.arrays(np.int64, len(cells), elements=st.integers(-(2**35), 2**35)))
    enc = encode_counts(vals, indices=idx, n_cells=n_cells)
    got_idx, got_vals = decode_counts(enc, expected_cells=n_cells)
    assert got_idx is not None
    assert ints_from_keys(got_idx) == cells
    np.testing.assert_array_equal(got_vals, vals)
    if n_cells > 10_000:
        return
    dense = to_dense(got_idx, got_vals, n_cells)
    assert dense.sum() == vals.sum() and dense.size == n_cells


@given(st.data())
def test_merge_is_sum(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 200))
    parts = data.draw(
        st.lists(hnp.arrays(np.int64, n, elements=st.integers(-(2**50), 2**50)), min_size=1)
    )
    total = parts[0]
    for p in parts[1:]:
        total = merge_sum(total, p)
    expected = [sum(int(p[i]) for p in parts) for i in range(n)]
    assert total.tolist() == expected


def test_merge_overflow_and_shape() -> None:
    with pytest.raises(PayloadInvalid, match="overflow"):
        merge_sum(np.array([I64.max, 1]), np.array([1, 1]))
    with pytest.raises(PayloadInvalid, match="overflow"):
        merge_sum(np.array([I64.min]), np.array([-1]))
    with pytest.raises(PayloadInvalid, match="shape"):
        merge_sum(np.zeros(3, np.int64), np.zeros(4, np.int64))
    with pytest.raises(PayloadInvalid, match="integer"):
        merge_sum(np.zeros(3), np.zeros(3))


def test_merge_sparse() -> None:
    idx, vals = merge_sparse([1, 5], [10, 20], [0, 5, 9], [1, 2, 3])
    np.testing.assert_array_equal(idx, [0, 1, 5, 9])
    np.testing.assert_array_equal(vals, [1, 10, 22, 3])


def _raw(body: bytes, **header: object) -> EncodedCounts:
    fields: dict[str, object] = {
        "layout": "dense",
        "n_cells": len(body) // 4,
        "dtype": "<i4",
        "data": base64.b64encode(zlib.compress(body)).decode(),
        "sha256": hashlib.sha256(body).hexdigest(),
    }
    fields.update(header)
    return EncodedCounts.model_validate(fields)


GOOD = encode_counts(np.arange(-500, 500), n_cells=1000)
BODY = np.arange(-500, 500).astype("<i4").tobytes()
COMPRESSED = zlib.compress(BODY)


def _flip(text: str, pos: int) -> str:
    raw = bytearray(base64.b64decode(text))
    raw[pos % len(raw)] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


@pytest.mark.parametrize(
    ("enc", "expected_cells", "exc", "match"),
    [
        (GOOD, 999, PayloadInvalid, "1000 cells but the study config implies 999"),
        (GOOD.model_copy(update={"data": _flip(GOOD.data, 5)}), 1000, PayloadInvalid, None),
        # the last byte is the stream's Adler-32: the inflater itself must check it
        (GOOD.model_copy(update={"data": _flip(GOOD.data, -1)}), 1000, PayloadInvalid, "zlib"),
        (GOOD.model_copy(update={"data": GOOD.data[:-8]}), 1000, PayloadInvalid, None),
        (GOOD.model_copy(update={"data": GOOD.data + "!!"}), 1000, PayloadInvalid, "base64"),
        (GOOD.model_copy(update={"sha256": "0" * 64}), 1000, PayloadInvalid, "sha256"),
        (GOOD.model_copy(update={"dtype": "<i8"}), 1000, PayloadInvalid, "header implies 8000"),
        (GOOD.model_copy(update={"nnz": 3}), 1000, PayloadInvalid, "has no nnz"),
        (GOOD.model_copy(update={"layout": "sparse"}), 1000, PayloadInvalid, "needs nnz"),
        (_raw(BODY[:-4], n_cells=1000), 1000, PayloadInvalid, "3996 bytes"),
        (_raw(BODY + BODY[:4], n_cells=1000), 1000, PayloadInvalid, "more than the 4000"),
        (
            _raw(BODY, data=base64.b64encode(COMPRESSED[:-6]).decode()),
            1000,
            PayloadInvalid,
            "truncated",
        ),
        (
            _raw(BODY, data=base64.b64encode(COMPRESSED + b"junk").decode()),
            1000,
            PayloadInvalid,
            "trailing",
        ),
        (_raw(b"x" * 4000, data="bm90IHpsaWI="), 1000, PayloadInvalid, "zlib"),
        (_raw(BODY, data="A" * 8000), 1000, PayloadTooLarge, "characters"),
    ],
)
def test_corruption_refused(
    enc: EncodedCounts, expected_cells: int, exc: type[Exception], match: str | None
) -> None:
    with pytest.raises(exc, match=match):
        decode_counts(enc, expected_cells=expected_cells)


def test_bomb_is_bounded() -> None:
    bomb = b"\0" * 3_000_000  # 3 MB of zeros in ~3 kB
    enc = _raw(bomb[:4000], data=base64.b64encode(zlib.compress(bomb, 9)).decode())
    with pytest.raises(PayloadInvalid, match="more than the 4000 bytes"):
        decode_counts(enc, expected_cells=1000)


def test_size_limit() -> None:
    with pytest.raises(PayloadTooLarge, match="over the 100 limit"):
        decode_counts(GOOD, expected_cells=1000, max_bytes=100)


def test_range_checked() -> None:
    enc = encode_counts(np.array([0, 2**41]), n_cells=2)
    with pytest.raises(PayloadInvalid, match="outside the allowed range"):
        decode_counts(enc, expected_cells=2)
    assert decode_counts(enc, expected_cells=2, max_abs=2**41)[1][1] == 2**41
    small = encode_counts(np.array([0, -11]), n_cells=2)  # <i4: checked when max_abs < 2**31
    assert small.dtype == "<i4"
    with pytest.raises(PayloadInvalid, match="outside the allowed range"):
        decode_counts(small, expected_cells=2, max_abs=10)


@pytest.mark.parametrize(
    "indices", [[3, 2], [1, 1], [-1, 2], [0, 10]], ids=["desc", "dup", "neg", "out"]
)
def test_bad_sparse_indices(indices: list[int]) -> None:
    body = np.array(indices, "<i8").tobytes() + np.array([1, 1], "<i4").tobytes()
    enc = _raw(body, layout="sparse", n_cells=10, nnz=2)
    with pytest.raises(PayloadInvalid, match="strictly increasing"):
        decode_counts(enc, expected_cells=10)
    with pytest.raises(ValueError, match="strictly increasing"):
        encode_counts([1, 1], indices=indices, n_cells=10)


@pytest.mark.parametrize(
    "patch",
    [
        {"n_cells": 3.0},
        {"n_cells": "3"},
        {"n_cells": 2**8064 + 1},
        {"n_cells": 0},
        {"nnz": 1.5},
        {"dtype": "<f8"},
        {"dtype": "|O"},
        {"format": "fedod-counts/2"},
        {"sha256": "ABC"},
        {"extra": 1},
    ],
)
def test_wire_model_strict(patch: dict[str, object]) -> None:
    doc = GOOD.model_dump() | patch
    with pytest.raises(ValidationError):
        EncodedCounts.model_validate_json(json.dumps(doc))


def test_encode_rejects_floats_and_wrong_length() -> None:
    with pytest.raises(ValueError, match="integer"):
        encode_counts(np.zeros(3), n_cells=3)
    with pytest.raises(ValueError, match="expected 4"):
        encode_counts(np.zeros(3, np.int64), n_cells=4)


def test_noisy_100k_cells_is_small() -> None:
    """100 tables of ~1000 cells at noise scale 100 (epsilon 1) stays far below 300 KB."""
    noisy = add_discrete_laplace(np.zeros(100_000, np.int64), sensitivity=100, epsilon=1)
    size = len(encode_counts(noisy, n_cells=noisy.size).model_dump_json())
    assert size < 300_000, size
