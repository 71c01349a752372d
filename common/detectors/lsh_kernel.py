"""Fast exact scoring kernel for LSH iTables: the same bucket indices as
:meth:`common.histograms.hashing.LSHFamily.flat_index` and the same scores, with fewer passes over
the data.

With few features each table's bucket is a sum over features of a per-feature lookup
``T_i[r_i]``, ``r_i`` the number of the feature's distinct cuts ``<= x_i`` (as in
``common.histograms.hashing``). This kernel works on row blocks small enough to stay in cache and

1. ranks all features of a block at once with *uniform bucket tables* instead of binary
   searches: ``b(v) = trunc(clip(v * scale_i + shift_i, o_i, o_i + K_i - 1))`` is monotone in
   ``v`` (each floating-point step is), so a cut ``c`` with ``b(c) < b(x)`` is below ``x``
   and one with ``b(c) > b(x)`` above it; ``K_i`` is chosen so that no two cuts share a
   bucket (checked with this very formula), and the one cut that may share ``x``'s bucket is
   compared exactly (``x >= c`` in float64). The features' tables sit side by side at
   offsets ``o_i``, so one gather serves all features. Features whose cuts cannot be
   separated that way fall back to ``np.searchsorted``;
2. adds the lookups of *pairs* of features at once: ``P[r_a * n_b + r_b] = T_a[r_a] +
   T_b[r_b]`` (with the table offsets folded into the first), half the row additions;
3. gathers the per-cell scores and sums them over the tables with ``numpy.sum`` (the same
   reduction, hence the same floating-point result, as the reference path).

Exactness is checked against ``LSHFamily.flat_index`` and the reference scores in
``tests/common/test_lsh_kernel.py``. Used for ``LSHiTables.decision_function`` when the family
has no more features in use than bits per table (the case ``common.histograms.hashing`` handles with
lookups); otherwise the family's own comparison pass is used.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from common.histograms.hashing import LSHFamily

_BLOCK = 4096  # rows per block: the (block, m) gathers stay in a core's L2 cache
_PAIR_ROWS = 1 << 14  # largest pair table (rows); 100 tables x 2 bytes x 16k = 3.2 MB
_BUCKETS_MAX = 1 << 20


def _buckets(v: NDArray[np.float64], scale: Any, shift: Any, low: Any, high: Any
             ) -> NDArray[np.intp]:
    """Monotone flat bucket of each value (truncation is the floor on the clipped values,
    all >= 0). ``scale`` .. ``high`` are scalars or per-column vectors."""
    b = np.multiply(v, scale)
    b += shift
    np.maximum(b, low, out=b)
    np.minimum(b, high, out=b)
    out: NDArray[np.intp] = b.astype(np.intp)
    return out


def _ranker(cuts: NDArray[np.float64], lo: float, hi: float, offset: int
            ) -> tuple[float, float, int, NDArray[np.integer[Any]], NDArray[np.float64]] | None:
    """``(scale, shift, K, base, cut_at)`` of one feature whose buckets start at ``offset``:
    rank(v) = base[b - offset] + (v >= cut_at[b - offset]); ``None`` if no ``K <=
    _BUCKETS_MAX`` separates the cuts (or the bounds are degenerate)."""
    if not hi > lo or cuts.size == 0:
        return None
    k = 1 << max(4, int(cuts.size * 8).bit_length())
    while k <= _BUCKETS_MAX:
        scale = k / (hi - lo)
        shift = offset - lo * scale
        if not (np.isfinite(scale) and np.isfinite(shift)):  # bounds too close or too wide
            return None
        b = _buckets(cuts, scale, shift, float(offset), float(offset + k - 1)) - offset
        if np.all(np.diff(b) > 0):
            base = np.searchsorted(b, np.arange(k), side="left")
            cut_at = np.full(k, np.inf)
            cut_at[b] = cuts
            return scale, shift, k, base, cut_at
        k <<= 2
    return None


class FastScorer:
    """Exact flat indices and scores of an :class:`LSHFamily` (module docstring)."""

    def __init__(self, family: LSHFamily) -> None:
        self.family = family
        used, cuts, tables = family._lookup  # noqa: SLF001 -- the family's own lookups
        self.cuts = cuts
        self.tables = tables
        pairs, singles = _pairing([t.shape[0] for t in tables])
        # ranked rows: first features of the pairs, the singles, second features of pairs
        self.order = [a for a, _ in pairs] + singles + [b for _, b in pairs]
        self.n_pairs = len(pairs)
        # ranks and keys (< _PAIR_ROWS for a pair, <= #cuts alone) in the smallest type
        small_ranks = max(c.size for c in cuts) < 1 << 15
        self.rank_type: type[np.signedinteger[Any]] = np.int16 if small_ranks else np.int32
        widths = [tables[b].shape[0] for _, b in pairs] + [1] * len(singles)
        self.width: NDArray[Any] = np.array(widths, dtype=self.rank_type)[:, None]
        self.cols = used[self.order]
        self.slow: list[int] = []  # rows ranked by np.searchsorted
        params: list[tuple[float, float, int, int]] = []
        bases: list[NDArray[Any]] = []
        cut_ats: list[NDArray[np.float64]] = []
        offset = 0
        for row, t in enumerate(self.order):
            i = int(used[t])
            r = _ranker(cuts[t], float(family.lo[i]), float(family.hi[i]), offset)
            if r is None:
                self.slow.append(row)
                continue
            scale, shift, k, base, cut_at = r
            params.append((scale, shift, offset, offset + k - 1))
            bases.append(base)
            cut_ats.append(cut_at)
            offset += k
        self.fast = [row for row in range(len(self.order)) if row not in self.slow]
        arrays = (np.array(p, dtype=np.float64)[:, None] for p in zip(*params, strict=True))
        self.bucket_args = tuple(arrays) if params else ()
        self.base: NDArray[Any] = np.concatenate([np.empty(0), *bases]).astype(self.rank_type)
        self.cut_at: NDArray[np.float64] = np.concatenate([np.empty(0), *cut_ats])
        self.lookups: list[tuple[int, int | None]] = [*pairs, *((a, None) for a in singles)]

    @cached_property
    def group_tables(self) -> list[NDArray[Any]]:
        """One combined lookup per pair (``P[r_a * n_b + r_b] = T_a[r_a] + T_b[r_b]``) or
        single feature, in key order, table offsets folded into the first."""
        dtype = np.uint16 if self.family.n_cells <= 1 << 16 else np.uint32
        # entries (and sums of two) are < n_cells: exact in dtype
        small: list[NDArray[Any]] = [t.astype(dtype) for t in self.tables]
        out = [small[a] if b is None else
               (small[a][:, None, :] + small[b][None, :, :]).reshape(-1, small[a].shape[1])
               for a, b in self.lookups]
        out[0] = out[0] + self.family.offsets[:-1].astype(dtype)
        return out

    def ranks(self, X: NDArray[np.float64]) -> NDArray[np.integer[Any]]:
        """``(rows of self.order, n)``: each used feature's number of distinct cuts ``<= x``."""
        v = np.take(X.T, self.cols, axis=0)  # (features, n), C order
        if not self.slow:
            return self._bucket_ranks(v)
        out = np.empty(v.shape, dtype=self.rank_type)
        if self.fast:
            out[self.fast] = self._bucket_ranks(v[self.fast])
        for row in self.slow:
            out[row] = np.searchsorted(self.cuts[self.order[row]], v[row], side="right")
        return out

    def _bucket_ranks(self, v: NDArray[np.float64]) -> NDArray[Any]:
        b = _buckets(v, *self.bucket_args)
        rank: NDArray[Any] = np.take(self.base, b)
        rank += np.take(self.cut_at, b) <= v
        return rank

    def keys(self, X: NDArray[np.float64]) -> NDArray[Any]:
        """``(lookups, n)`` row keys into :attr:`group_tables`: ``r_a * n_b + r_b`` for a
        pair, ``r_a`` for a single feature."""
        r = self.ranks(X)
        n_keys = len(self.lookups)
        keys: NDArray[Any] = r[:n_keys] * self.width
        keys[: self.n_pairs] += r[n_keys:]
        return keys

    def iter_flat_blocks(self, X: NDArray[np.float64], block: int = _BLOCK
                         ) -> Iterator[tuple[int, NDArray[Any]]]:
        """``(start, flat indices)`` of row blocks, as ``LSHFamily.iter_flat_index``. The
        yielded array is a buffer reused by the next block (copy it to keep it)."""
        tables = self.group_tables
        acc = np.empty((block, self.family.n_tables), dtype=tables[0].dtype)
        tmp = np.empty_like(acc)
        for start in range(0, X.shape[0], block):
            stop = min(start + block, X.shape[0])
            keys = self.keys(X[start:stop])
            a, t = acc[: stop - start], tmp[: stop - start]
            # mode="clip" only to skip numpy's buffering of `out`: keys are in range
            np.take(tables[0], keys[0], axis=0, out=a, mode="clip")
            for key, table in zip(keys[1:], tables[1:], strict=True):
                np.take(table, key, axis=0, out=t, mode="clip")
                a += t
            yield start, a

    def flat_blocks(self, X: NDArray[np.float64]) -> list[tuple[int, NDArray[Any]]]:
        """All blocks of :meth:`iter_flat_blocks`, copied."""
        return [(start, b.copy()) for start, b in self.iter_flat_blocks(X)]

    def score(self, X: NDArray[np.float64], cell_scores: NDArray[np.float64]
              ) -> NDArray[np.float64]:
        """Sum over tables of ``cell_scores`` at each row's buckets (``numpy.sum`` per row,
        as the reference ``np.take(cell_scores, flat_index).sum(axis=1)``)."""
        scores = np.empty(X.shape[0], dtype=np.float64)
        values = np.empty((_BLOCK, self.family.n_tables), dtype=np.float64)
        for start, block in self.iter_flat_blocks(X, _BLOCK):
            v = values[: block.shape[0]]
            np.take(cell_scores, block, out=v, mode="clip")
            np.sum(v, axis=1, out=scores[start:start + block.shape[0]])
        return scores


def _pairing(rows: list[int]) -> tuple[list[tuple[int, int]], list[int]]:
    """Greedy pairs of lookups (in order) whose combined table has at most ``_PAIR_ROWS``
    rows, and the lookups left single."""
    pairs: list[tuple[int, int]] = []
    singles: list[int] = []
    order = list(range(len(rows)))
    while order:
        a = order.pop(0)
        partner = next((b for b in order if rows[a] * rows[b] <= _PAIR_ROWS), None)
        if partner is None:
            singles.append(a)
        else:
            order.remove(partner)
            pairs.append((a, partner))
    return pairs, singles


def usable(family: LSHFamily) -> bool:
    """The family hashes by lookups (few features in use), which this kernel speeds up."""
    used = family._lookup[0]  # noqa: SLF001
    return bool(0 < used.size <= family.features.shape[1])


_SCORERS: weakref.WeakKeyDictionary[LSHFamily, FastScorer] = weakref.WeakKeyDictionary()


def scorer(family: LSHFamily) -> FastScorer | None:
    """The family's kernel (built once per family), or ``None`` where it does not apply."""
    if not usable(family):
        return None
    found = _SCORERS.get(family)
    if found is None:
        found = _SCORERS[family] = FastScorer(family)
    return found
