"""Random-feature LSH families (RF-LSH) for LSH iTables, derived from a public seed.

A family is ``m`` hash tables; table ``j`` concatenates ``l_j`` one-bit functions
``h(x) = 1 if x[i] >= c else 0`` with a random feature ``i`` and a random cut
``c ~ U[lo_i, hi_i]`` on the study's public bounds (Li & Pham, "An Efficient Hashing-based
Ensemble Method for Collaborative Outlier Detection", section 3). Bit ``k`` of table ``j``
is bit ``k`` (little-endian) of the bucket index ``g_j(x)`` in ``[0, 2**l_j)``.

Every participant must derive the *same* functions from the same inputs, whatever its numpy
version, so nothing here uses numpy's ``Generator`` distributions. All randomness comes from
a SHA-256 counter-mode stream (:class:`common.histograms.seeded.Sha256Stream`) keyed by
``(seed, d, n_tables, sample_size)``; ``U(a, b) = a + (b - a) u``, a feature is
``floor(u * d)``. The key is ``"fedod-lsh-stream/1\0" || len(seed) (u32 LE) ||
seed || d (u32) || n_tables (u32) || sample_size (u64)``. Draws are consumed in a fixed order
(per table: ``f``, ``l``, then per bit: feature, cut), so the result depends on nothing but
the inputs. The functions are public; privacy comes from the noise added to the counts
(``common.histograms.release``), not from the hashing. ``LSHFamily.digest()`` pins the result.

Hashing is exact (``x >= c`` in float64) and vectorised: with few features, each feature's
value is ranked once among that feature's sorted cuts and a per-feature lookup table adds the
bits it sets in all ``m`` tables at once; otherwise one comparison pass per bit position.

Table sizes follow the paper: ``f ~ U(1/sqrt(s), 1 - 1/sqrt(s))``,
``L = log_{max(2, 1/f)}(s)``, ``l ~ U(1 + L/2, L)`` with ``s = sample_size``; the number of
bits is ``l`` rounded half up, at least 1 (so ``s = 1000`` gives 2 to 10 bits).
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from common.histograms.seeded import Sha256Stream, as_bounds

FORMAT_VERSION = 1
_STREAM_TAG = b"fedod-lsh-stream/1\x00"
_DIGEST_TAG = b"fedod-lsh-family/1\x00"
_CHUNK_ROWS = 2048
_MAX_BITS = 40


def _acc_type(width: int) -> type[np.unsignedinteger[Any]]:
    """Smallest unsigned type holding ``width``-bit indices (uint16 halves memory traffic)."""
    if width <= 16:
        return np.uint16
    return np.uint32 if width <= 32 else np.uint64


def _table_bits(stream: Sha256Stream, sample_size: int) -> int:
    s = float(sample_size)
    a, b = 1.0 / math.sqrt(s), 1.0 - 1.0 / math.sqrt(s)
    f = stream.between(min(a, b), max(a, b))
    big_l = math.log(s) / math.log(max(2.0, 1.0 / f))
    a, b = 1.0 + 0.5 * big_l, big_l
    length = stream.between(min(a, b), max(a, b))
    return max(1, min(_MAX_BITS, math.floor(length + 0.5)))


@dataclass(frozen=True, eq=False)
class LSHFamily:
    """``m`` RF-LSH tables; unused bit slots are padded with feature 0 and cut ``+inf``.

    Attributes
    ----------
    lo, hi : (d,) float64
        Public bounds the cuts were drawn on.
    features : (m, L) int32
        Feature of each bit; ``L = max(n_bits)``.
    cuts : (m, L) float64
        Cut of each bit.
    n_bits : (m,) int32
        Bits ``l_j`` of each table.
    offsets : (m + 1,) int64
        Table ``j`` occupies ``offsets[j]:offsets[j + 1]`` of the flat count vector.
    """

    lo: NDArray[np.float64]
    hi: NDArray[np.float64]
    features: NDArray[np.int32]
    cuts: NDArray[np.float64]
    n_bits: NDArray[np.int32]
    offsets: NDArray[np.int64]

    @property
    def n_tables(self) -> int:
        return int(self.n_bits.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.lo.shape[0])

    @property
    def n_cells(self) -> int:
        return int(self.offsets[-1])

    def digest(self) -> str:
        """Hex SHA-256 of the canonical encoding (format version, shapes, all arrays, LE)."""
        m, width = self.features.shape
        h = hashlib.sha256(_DIGEST_TAG)
        h.update(struct.pack("<IIII", FORMAT_VERSION, m, width, self.n_features))
        for arr, dtype in (
            (self.lo, "<f8"),
            (self.hi, "<f8"),
            (self.n_bits, "<i4"),
            (self.features, "<i4"),
            (self.cuts, "<f8"),
        ):
            h.update(np.ascontiguousarray(arr, dtype=dtype).tobytes())
        return h.hexdigest()

    def _check(self, X: ArrayLike) -> NDArray[np.float64]:
        arr = np.asarray(X, dtype=np.float64)
        if arr.ndim != 2 or arr.shape[1] != self.n_features:
            raise ValueError(
                f"X must have shape (n, {self.n_features}), got {arr.shape}"
            )
        if not np.all(np.isfinite(arr)):
            raise ValueError("X contains NaN or infinite values")
        return arr

    @cached_property
    def _lookup(self) -> tuple[NDArray[np.intp], list[NDArray[np.float64]], list[NDArray[Any]]]:
        """Per used feature ``i``: its sorted distinct cuts ``U_i`` and a table ``T_i`` with
        ``T_i[r, j]`` = the bits of table ``j`` on feature ``i`` that are set when exactly
        ``r`` cuts of ``U_i`` are ``<= x_i``. Then ``g(x) = sum_i T_i[#(U_i <= x_i)]``."""
        m, width = self.features.shape
        active = np.arange(width)[None, :] < self.n_bits[:, None]
        used = np.unique(self.features[active]).astype(np.intp)
        cuts: list[NDArray[np.float64]] = []
        tables: list[NDArray[Any]] = []
        for i in used:
            on_i = active & (self.features == i)
            distinct = np.unique(self.cuts[on_i])
            j, k = np.nonzero(on_i)
            steps = np.zeros((distinct.size + 1, m), dtype=np.int64)
            # bit k of table j switches on from rank pos + 1 upwards
            np.add.at(steps, (np.searchsorted(distinct, self.cuts[j, k]) + 1, j),
                      np.left_shift(np.int64(1), k.astype(np.int64)))
            table = np.cumsum(steps, axis=0)
            cuts.append(distinct)
            tables.append(table)
        return used, cuts, tables

    @cached_property
    def _plain_tables(self) -> list[NDArray[Any]]:
        dtype = _acc_type(int(self.features.shape[1]))
        return [t.astype(dtype) for t in self._lookup[2]]

    @cached_property
    def _flat_tables(self) -> list[NDArray[Any]]:
        """``_lookup`` tables with the table offsets folded into the first one."""
        _, _, tables = self._lookup
        dtype = _acc_type(max(1, (self.n_cells - 1).bit_length()))
        flat = [t.astype(dtype) for t in tables]
        if flat:
            flat[0] += self.offsets[:-1].astype(dtype)
        return flat

    def iter_flat_index(self, X: ArrayLike) -> Iterator[tuple[int, NDArray[np.integer[Any]]]]:
        """``flat_index`` in row blocks: yields ``(start, block)`` with ``block`` the flat
        indices (an integer array) of rows ``start:start + len(block)``. Keeps memory at a
        few MB for any n."""
        return self._blocks(self._check(X), flat=True)

    def _blocks(
        self, arr: NDArray[np.float64], *, flat: bool
    ) -> Iterator[tuple[int, NDArray[np.integer[Any]]]]:
        n = arr.shape[0]
        m, width = self.features.shape
        used, cuts, _ = self._lookup
        if used.size <= width:
            # few features: one sorted search and one table lookup per feature
            tables = self._flat_tables if flat else self._plain_tables
            ranks = [np.searchsorted(cuts[t], arr[:, i], side="right")
                     for t, i in enumerate(used)]
            buffer = np.empty((_CHUNK_ROWS, m), dtype=tables[0].dtype)
            for start in range(0, n, _CHUNK_ROWS):
                stop = min(start + _CHUNK_ROWS, n)
                acc = np.take(tables[0], ranks[0][start:stop], axis=0)
                tmp = buffer[: stop - start]
                for rank, table in zip(ranks[1:], tables[1:], strict=True):
                    np.take(table, rank[start:stop], axis=0, out=tmp)
                    acc += tmp
                yield start, acc
        else:
            # many features: one comparison per bit position
            xt = np.ascontiguousarray(arr.T)
            dtype = _acc_type(width)
            weights = [dtype(1 << k) for k in range(width)]
            cut_cols = self.cuts[:, :, None]
            shift = self.offsets[:-1] if flat else np.zeros(m, dtype=np.int64)
            for start in range(0, n, _CHUNK_ROWS):
                block = xt[:, start:start + _CHUNK_ROWS]
                acc_t = np.zeros((m, block.shape[1]), dtype=dtype)
                bit = np.empty((m, block.shape[1]), dtype=np.bool_)
                for k in range(width):
                    np.greater_equal(block[self.features[:, k]], cut_cols[:, k], out=bit)
                    acc_t += bit * weights[k]
                yield start, np.add(acc_t.T, shift, dtype=np.int64)

    def hash(self, X: ArrayLike) -> NDArray[np.int64]:
        """Bucket index ``g_j(x)`` of every row in every table, shape ``(n, m)``.

        Vectorised over rows and tables. Unused bit slots have cut ``+inf`` and never fire.
        """
        arr = self._check(X)
        out = np.empty((arr.shape[0], self.n_tables), dtype=np.int64)
        for start, block in self._blocks(arr, flat=False):
            out[start:start + block.shape[0]] = block
        return out

    def flat_index(self, X: ArrayLike) -> NDArray[np.int64]:
        """Index of each row's bucket in the flat count vector, shape ``(n, m)``."""
        return self.hash(X) + self.offsets[:-1]

    def histogram(self, X: ArrayLike) -> NDArray[np.int64]:
        """Counts of all rows in all tables, the flat ``(n_cells,)`` int64 vector."""
        counts = np.zeros(self.n_cells, dtype=np.int64)
        for _, block in self.iter_flat_index(X):
            counts += np.bincount(block.ravel(), minlength=self.n_cells)
        return counts


def derive_lsh_family(
    seed: bytes, lo: ArrayLike, hi: ArrayLike, n_tables: int, sample_size: int
) -> LSHFamily:
    """Derive ``n_tables`` RF-LSH tables on the public bounds ``[lo, hi]`` from ``seed``.

    Parameters
    ----------
    seed : bytes
        Public study seed (e.g. 32 random bytes from the config).
    lo, hi : array-like, shape (d,)
        Public per-feature bounds; cuts are uniform on ``[lo_i, hi_i]``.
    n_tables : int
        Number of tables ``m``.
    sample_size : int
        Expected table size ``s`` of the paper; sets the table sizes ``l_j``.
    """
    if not isinstance(seed, bytes | bytearray) or len(seed) == 0:
        raise ValueError("seed must be non-empty bytes")
    if n_tables < 1:
        raise ValueError(f"n_tables must be >= 1, got {n_tables}")
    if sample_size < 2:
        raise ValueError(f"sample_size must be >= 2, got {sample_size}")
    lo_a, hi_a = as_bounds(lo, hi)
    d = lo_a.shape[0]
    key = (
        _STREAM_TAG
        + struct.pack("<I", len(seed))
        + bytes(seed)
        + struct.pack("<IIQ", d, n_tables, sample_size)
    )
    stream = Sha256Stream(key)
    bits: list[int] = []
    feats: list[list[int]] = []
    cuts: list[list[float]] = []
    for _ in range(n_tables):
        n_b = _table_bits(stream, sample_size)
        row_f: list[int] = []
        row_c: list[float] = []
        for _ in range(n_b):
            i = stream.below(d)
            row_f.append(i)
            row_c.append(stream.between(float(lo_a[i]), float(hi_a[i])))
        bits.append(n_b)
        feats.append(row_f)
        cuts.append(row_c)
    width = max(bits)
    features = np.zeros((n_tables, width), dtype=np.int32)
    cut_arr = np.full((n_tables, width), np.inf, dtype=np.float64)
    for j, (row_f, row_c) in enumerate(zip(feats, cuts, strict=True)):
        features[j, : len(row_f)] = row_f
        cut_arr[j, : len(row_c)] = row_c
    n_bits = np.array(bits, dtype=np.int32)
    offsets = np.zeros(n_tables + 1, dtype=np.int64)
    np.cumsum(np.left_shift(np.int64(1), n_bits.astype(np.int64)), out=offsets[1:])
    for arr in (features, cut_arr, n_bits, offsets):
        arr.setflags(write=False)
    return LSHFamily(lo=lo_a, hi=hi_a, features=features, cuts=cut_arr, n_bits=n_bits,
                     offsets=offsets)
