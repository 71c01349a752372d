"""Sparse cell keys of any width: a cell index as a row of 63-bit words.

A grid of ``n_cells`` cells numbers its cells row-major, ``0 .. n_cells - 1``; with many
features that index needs far more than 64 bits (4 bins over 784 features: 1,568 bits). A
*key* is that index written in base ``2**63``, most significant word first, as a row of
``key_words(n_cells)`` non-negative int64 words. Keys of one grid all have the same width,
so the lexicographic order of the rows is the numeric order of the indices, and a grid of at
most ``2**63`` cells has one-word keys equal to its plain int64 cell index (the wire format
of small grids is unchanged).

Arrays of keys have shape ``(n, W)``; a 1-d int64 array is accepted as one-word keys.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "WORD_BITS",
    "MAX_KEY_BITS",
    "key_words",
    "as_keys",
    "keys_from_ints",
    "ints_from_keys",
    "keys_problem",
    "union_keys",
    "key_strings",
    "keys_from_strings",
]

WORD_BITS = 63
MAX_KEY_BITS = WORD_BITS * 128
"""Widest key a grid may have (8,064 bits, about 1 KiB per released cell)."""
_MASK = (1 << WORD_BITS) - 1


def key_words(n_cells: int) -> int:
    """Number of 63-bit words in a key of a grid of ``n_cells`` cells (at least 1)."""
    if n_cells < 1:
        raise ValueError(f"n_cells must be >= 1, got {n_cells}")
    bits = (int(n_cells) - 1).bit_length()
    if bits > MAX_KEY_BITS:
        raise ValueError(
            f"a grid of {n_cells} cells needs {bits}-bit keys, more than {MAX_KEY_BITS}; "
            "use fewer bins, fewer grid features or a projection"
        )
    return max(1, -(-bits // WORD_BITS))


def as_keys(keys: ArrayLike, words: int | None = None) -> NDArray[np.int64]:
    """``keys`` as an ``(n, W)`` int64 array; 1-d input is one-word keys.

    With ``words`` given, an empty input gets that width and a non-empty 1-d input for a grid
    of wider keys is refused (a 1-d array never holds several words per key).
    """
    arr = np.asarray(keys)
    if arr.size and arr.dtype.kind not in "iu":
        raise ValueError(f"cell keys must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size == 0 and words is not None:
        return arr.reshape(0, words)
    if arr.ndim == 1:
        if words not in (None, 1):
            raise ValueError(f"this grid has {words}-word keys; pass an (n, {words}) array")
        return arr.reshape(-1, 1)
    if arr.ndim != 2:
        raise ValueError(f"cell keys must be a 1-d or 2-d array, got shape {arr.shape}")
    return arr


def keys_from_ints(values: Iterable[int], words: int) -> NDArray[np.int64]:
    """Keys of the cell indices ``values`` (Python ints), ``words`` words each."""
    rows = [[(v >> (WORD_BITS * j)) & _MASK for j in range(words - 1, -1, -1)] for v in values]
    return np.array(rows, dtype=np.int64).reshape(-1, words)


def ints_from_keys(keys: ArrayLike) -> list[int]:
    """The cell indices (Python ints) of ``keys``."""
    out = []
    for row in as_keys(keys).tolist():
        v = 0
        for w in row:
            v = (v << WORD_BITS) | w
        out.append(v)
    return out


def _increasing(keys: NDArray[np.int64]) -> bool:
    """True if the rows are strictly increasing in lexicographic order."""
    if keys.shape[0] < 2:
        return True
    a, b = keys[:-1], keys[1:]
    differ = a != b
    first = differ.argmax(axis=1)
    rows = np.arange(a.shape[0])
    return bool(differ.any(axis=1).all() and np.all(b[rows, first] > a[rows, first]))


def keys_problem(keys: ArrayLike, n_cells: int) -> str | None:
    """Why ``keys`` are not valid sorted keys of a grid of ``n_cells`` cells, or None."""
    words = key_words(n_cells)
    arr = np.asarray(keys)
    if arr.ndim == 1 and words == 1:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2 or arr.shape[1] != words or (arr.size and arr.dtype.kind not in "iu"):
        return f"keys must have shape (n, {words}) of integers for {n_cells} cells"
    k = arr.astype(np.int64)
    if not k.shape[0]:
        return None
    if np.any(k < 0) or not _increasing(k):
        return f"keys must be strictly increasing within [0, {n_cells})"
    if ints_from_keys(k[-1:])[0] >= n_cells:
        return f"keys must be strictly increasing within [0, {n_cells})"
    return None


def union_keys(
    a: NDArray[np.int64], b: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.intp], NDArray[np.intp]]:
    """Sorted union of two key arrays and the position of each input row in it."""
    both = np.concatenate([a, b])
    union, inverse = np.unique(both, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    return union, inverse[: a.shape[0]], inverse[a.shape[0]:]


def key_strings(keys: NDArray[np.int64]) -> list[str]:
    """Fixed-width hex strings of the keys (big-endian words): OpenDP map keys."""
    big = np.ascontiguousarray(keys.astype(">i8"))
    return [row.tobytes().hex() for row in big]


def keys_from_strings(strings: Iterable[str], words: int) -> NDArray[np.int64]:
    """Inverse of :func:`key_strings`."""
    raw = b"".join(bytes.fromhex(s) for s in strings)
    return np.frombuffer(raw, dtype=">i8").astype(np.int64).reshape(-1, words)
