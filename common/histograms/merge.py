"""Aggregation of released count vectors: a pure, exact sum (the coordinator's only maths).

The global model is the cell-wise sum of every participant's noisy histogram (README.md,
"Architecture"). Sums are exact ``int64``; an overflow is reported, never wrapped.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from common.errors import PayloadInvalid
from common.histograms.cellkeys import as_keys, union_keys

__all__ = ["merge_sum", "merge_sparse"]


def _as_int64(x: ArrayLike, name: str) -> NDArray[np.int64]:
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise PayloadInvalid(f"{name} must be an integer array, got dtype {arr.dtype}")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise PayloadInvalid(f"{name} has values beyond int64")
    return arr.astype(np.int64, copy=False)


def merge_sum(a: ArrayLike, b: ArrayLike) -> NDArray[np.int64]:
    """Exact cell-wise ``a + b`` as int64.

    Raises
    ------
    PayloadInvalid
        If the shapes differ or any cell would overflow int64.
    """
    x, y = _as_int64(a, "a"), _as_int64(b, "b")
    if x.shape != y.shape:
        raise PayloadInvalid(f"cannot merge counts of shape {x.shape} with shape {y.shape}")
    with np.errstate(over="ignore"):
        total = x + y
    overflow = ((x > 0) & (y > 0) & (total < 0)) | ((x < 0) & (y < 0) & (total >= 0))
    if overflow.any():
        raise PayloadInvalid(
            f"merged counts overflow int64 in {int(overflow.sum())} cell(s); "
            "a contribution is out of range"
        )
    return total


def merge_sparse(
    a_indices: ArrayLike, a_values: ArrayLike, b_indices: ArrayLike, b_values: ArrayLike
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Exact sum of two sparse vectors given as sorted ``(keys, values)`` pairs.

    Keys are ``(n, W)`` arrays of 63-bit words (:mod:`common.histograms.cellkeys`); a 1-d array is
    one-word keys, and an empty input may have any shape. Each input's keys must be unique.
    Returns the sorted union of the keys (1-d if both inputs were 1-d, else ``(n, W)``) and
    the summed values; a cell present in only one input keeps its value. Overflow or keys
    of different widths raise :class:`PayloadInvalid`.
    """
    av, bv = _as_int64(a_values, "a_values"), _as_int64(b_values, "b_values")
    flat = np.ndim(a_indices) == 1 and np.ndim(b_indices) == 1
    try:
        ai, bi = as_keys(a_indices), as_keys(b_indices)
    except ValueError as exc:
        raise PayloadInvalid(f"sparse keys: {exc}") from exc
    if ai.shape[0] == 0:
        ai = ai.reshape(0, bi.shape[1])
    if bi.shape[0] == 0:
        bi = bi.reshape(0, ai.shape[1])
    if ai.shape[0] != av.size or bi.shape[0] != bv.size or av.ndim != 1 or bv.ndim != 1:
        raise PayloadInvalid("sparse keys and values must be arrays of equal length")
    if ai.shape[1] != bi.shape[1]:
        raise PayloadInvalid(f"cannot merge {ai.shape[1]}-word keys with {bi.shape[1]}-word keys")
    union, pos_a, pos_b = union_keys(ai, bi)
    dense_a = np.zeros(union.shape[0], dtype=np.int64)
    dense_b = np.zeros(union.shape[0], dtype=np.int64)
    dense_a[pos_a] = av
    dense_b[pos_b] = bv
    return (union[:, 0] if flat else union), merge_sum(dense_a, dense_b)
