"""Aggregation of released count vectors: a pure, exact sum (the coordinator's only maths).

The global model is the cell-wise sum of every participant's noisy histogram (DESIGN 1.1).
Sums are exact ``int64``; an overflow is reported, never wrapped.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from common.errors import PayloadInvalid

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
    """Exact sum of two sparse vectors given as sorted ``(indices, values)`` pairs.

    Returns the union of the indices (sorted, unique) and the summed values; a cell present
    in only one input keeps its value. Overflow raises :class:`PayloadInvalid`.
    """
    ai, av = _as_int64(a_indices, "a_indices"), _as_int64(a_values, "a_values")
    bi, bv = _as_int64(b_indices, "b_indices"), _as_int64(b_values, "b_values")
    if ai.shape != av.shape or bi.shape != bv.shape or ai.ndim != 1 or bi.ndim != 1:
        raise PayloadInvalid("sparse indices and values must be 1-d arrays of equal length")
    union = np.union1d(ai, bi)
    dense_a = np.zeros(union.shape, dtype=np.int64)
    dense_b = np.zeros(union.shape, dtype=np.int64)
    dense_a[np.searchsorted(union, ai)] = av
    dense_b[np.searchsorted(union, bi)] = bv
    return union, merge_sum(dense_a, dense_b)
