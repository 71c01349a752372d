"""Algorithm 1 of Rauch, Olatunji & Khosla over occupied grid cells (pure numpy).

"Achieving differential privacy for k-NN based outlier detection by data partitioning": a
point is scored by visiting the cells around its own in order of L1 distance ``t = 0, 1, ...,
max_depth`` (in cells) and accumulating their counts until ``k`` records are covered (basic:
the distance of the last cell visited; weighted: ``(1/k) sum_t t n_t``). Instead of
enumerating the ``~(2d)^max_depth`` neighbour cells, :func:`knn_grid_scores` scans the
released non-empty cells with vectorised L1 distances, which gives the same scores. The
estimator around it is :class:`common.detectors.grid_knn.GridKNN`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["knn_grid_scores"]

_MAX_BLOCK = 4_000_000
_CELL_BLOCK = 4096


def _l1(q: NDArray[np.integer[Any]], c: NDArray[np.integer[Any]], bins: int) -> NDArray[np.int32]:
    """L1 distances ``(len(q), len(c))`` between cell coordinates.

    With many dimensions and few bins, ``|a - b| = sum_t |[a > t] - [b > t]|`` turns the
    distance into a Hamming distance of thermometer codes, ``|A| + |B| - 2 A.B``: one float32
    matrix product (exact: every sum stays below 2**24).
    """
    dims = q.shape[1]
    if dims > 8 and dims * (bins - 1) < 2**24:
        levels = np.arange(bins - 1)
        qa = (q[:, :, None] > levels).reshape(q.shape[0], -1).astype(np.float32)
        ca = (c[:, :, None] > levels).reshape(c.shape[0], -1).astype(np.float32)
        d = qa.sum(axis=1)[:, None] + ca.sum(axis=1)[None, :] - 2 * (qa @ ca.T)
        out: NDArray[np.int32] = np.rint(d).astype(np.int32)
        return out
    dist = np.zeros((q.shape[0], c.shape[0]), dtype=np.int32)
    for i in range(dims):
        dist += np.abs(q[:, i, None].astype(np.int32) - c[None, :, i].astype(np.int32))
    return dist


def knn_grid_scores(
    query: NDArray[np.integer[Any]],
    cells: NDArray[np.integer[Any]],
    counts: NDArray[np.int64],
    *,
    k: int,
    max_depth: int,
    weighted: bool,
    bins: int | None = None,
) -> NDArray[np.float64]:
    """Algorithm 1 scores of query cell coordinates ``(n, d_g)`` against ``cells`` ``(K, d_g)``.

    ``counts`` are the (clamped, positive) counts of ``cells``. Scans the occupied cells in
    blocks of queries and cells, so memory stays bounded whatever ``n``, ``K`` and ``d_g``;
    ``bins`` (the largest coordinate + 1) enables the matrix-product distance for many dims.
    """
    n = query.shape[0]
    n_depth = max_depth + 2  # distances 0..max_depth, plus "further"
    out = np.full(n, float(max_depth + 1))
    if cells.shape[0] == 0 or n == 0:
        return out
    n_bins = bins or int(max(query.max(), cells.max())) + 1
    weights = counts.astype(np.float64)
    cell_block = min(cells.shape[0], _CELL_BLOCK)
    block = max(1, _MAX_BLOCK // cell_block)
    depth = np.arange(n_depth - 1, dtype=np.float64)
    for start in range(0, n, block):
        qb = query[start:start + block]
        rows = np.arange(qb.shape[0], dtype=np.int64)[:, None] * n_depth
        per_depth = np.zeros(qb.shape[0] * n_depth)
        for cstart in range(0, cells.shape[0], cell_block):
            dist = _l1(qb, cells[cstart:cstart + cell_block], n_bins)
            np.minimum(dist, max_depth + 1, out=dist)
            per_depth += np.bincount(
                (rows + dist).ravel(),
                weights=np.broadcast_to(weights[cstart:cstart + cell_block], dist.shape).ravel(),
                minlength=qb.shape[0] * n_depth,
            )
        counts_at = per_depth.reshape(qb.shape[0], n_depth)[:, :-1]
        cum = np.cumsum(counts_at, axis=1)
        if weighted:
            before = cum - counts_at
            taken = np.clip(k - before, 0.0, counts_at)
            missing = k - taken.sum(axis=1)
            out[start:start + block] = (taken @ depth + missing * (max_depth + 1)) / k
        else:
            reached = cum >= k
            out[start:start + block] = np.where(
                reached.any(axis=1), reached.argmax(axis=1), max_depth + 1
            )
    return out
