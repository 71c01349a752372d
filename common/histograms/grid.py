"""Uniform grid on public bounds, the partition behind DP grid k-NN.

Each used feature ``i`` is mapped onto ``[0, 1]`` with the study's *public* bounds,
``u = (x_i - lo_i) / (hi_i - lo_i)`` clipped to ``[0, 1]`` (never with data statistics,
which would leak), and split into ``bins`` equal intervals; the last interval is closed so
that ``x_i = hi_i`` falls in bin ``bins - 1``. Cells are numbered row-major over the grid
dimensions (Rauch, Olatunji & Khosla, "Achieving differential privacy for k-NN based outlier
detection by data partitioning", section 4). The number of cells ``bins ** d_g`` is not
bounded by 64 bits: a sparse release names cells by keys of several 63-bit words
(:mod:`common.histograms.cellkeys`), so a grid over hundreds of features works.

Optionally the grid lives in a random projection of the used features: ``p`` directions
with entries ``+-1 / sqrt(d_used)`` derived from a public seed (:func:`derive_projection`,
never from data); a row's projected coordinate ``z = P (u - 1/2)`` is mapped onto ``[0, 1]``
with the fixed public bounds ``[-PROJECTION_BOUND, PROJECTION_BOUND]`` and clipped. One
record still lands in exactly one cell, so the sensitivity of the counts stays 1.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from common.histograms.cellkeys import ints_from_keys, key_words, keys_from_ints

__all__ = ["GridSpec", "derive_projection", "DENSE_LIMIT", "PROJECTION_BOUND"]

DENSE_LIMIT = 50_000_000
"""Most cells of a dense count vector: the largest grid released densely (every cell on the
wire), so also the largest ``grid.cell_limit`` a study config accepts."""
PROJECTION_BOUND = 1.0
"""Public bound of a projected coordinate: the projection of the centred unit cube onto a
direction with entries ``+-1/sqrt(d)`` has standard deviation ``1/sqrt(12)`` for uniform data,
so ``[-1, 1]`` covers about 3.5 standard deviations; values beyond are clipped."""
_PROJECTION_TAG = b"fedod-grid-projection/1\x00"


def derive_projection(seed: bytes, d: int, p: int) -> NDArray[np.float64]:
    """``(p, d)`` random signs ``+-1/sqrt(d)`` from SHA-256 in counter mode over ``seed``.

    Bit ``j`` (little-endian within each byte, blocks in counter order) of the stream
    ``sha256(tag || len(seed) || seed || d || p || counter)`` gives entry ``j`` in row-major
    order: 1 means ``+``. Public, reproducible on every participant.
    """
    if d < 1 or p < 1:
        raise ValueError(f"a projection needs d >= 1 and p >= 1, got d={d}, p={p}")
    key = _PROJECTION_TAG + len(seed).to_bytes(4, "little") + seed
    key += d.to_bytes(4, "little") + p.to_bytes(4, "little")
    n_blocks = -(-(d * p) // 256)
    stream = b"".join(hashlib.sha256(key + t.to_bytes(8, "little")).digest()
                      for t in range(n_blocks))
    bits = np.unpackbits(np.frombuffer(stream, dtype=np.uint8), bitorder="little")[: d * p]
    signs: NDArray[np.float64] = (bits.astype(np.float64) * 2.0 - 1.0).reshape(p, d)
    return signs * (1.0 / float(np.sqrt(d)))


@dataclass(frozen=True, eq=False)
class GridSpec:
    """A ``bins ** d_g`` uniform grid over the features ``features`` (all when ``None``).

    ``lo`` and ``hi`` are the public bounds of *all* schema features; ``features`` picks the
    columns the grid uses; ``projection`` (``(p, d_used)``, public) replaces them by ``p``
    projected coordinates, so ``d_g = p``.
    """

    lo: ArrayLike
    hi: ArrayLike
    bins: int
    features: tuple[int, ...] | None = None
    projection: NDArray[np.float64] | None = None
    _lo: NDArray[np.float64] = field(init=False, repr=False)
    _span: NDArray[np.float64] = field(init=False, repr=False)
    _cols: NDArray[np.intp] = field(init=False, repr=False)
    _d: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        lo = np.array(self.lo, dtype=np.float64).ravel()
        hi = np.array(self.hi, dtype=np.float64).ravel()
        if lo.shape != hi.shape or lo.size == 0:
            raise ValueError("lo and hi must be non-empty and of equal length")
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
            raise ValueError("bounds must be finite")
        if np.any(lo >= hi):
            raise ValueError("every lower bound must be < its upper bound")
        if not 1 <= int(self.bins) <= 2**16:
            raise ValueError(f"bins must be in [1, 65536], got {self.bins}")
        if self.features is None:
            cols = np.arange(lo.size, dtype=np.intp)
        else:
            cols = np.array(self.features, dtype=np.intp)
            if cols.size == 0 or np.any(cols < 0) or np.any(cols >= lo.size):
                raise ValueError(f"features must index 0..{lo.size - 1}, got {self.features}")
            if np.unique(cols).size != cols.size:
                raise ValueError("features must not repeat")
        if self.projection is not None:
            proj = np.array(self.projection, dtype=np.float64)
            if proj.ndim != 2 or proj.shape[1] != cols.size or not np.all(np.isfinite(proj)):
                raise ValueError(f"projection must be a finite (p, {cols.size}) matrix")
            proj.setflags(write=False)
            object.__setattr__(self, "projection", proj)
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)
        object.__setattr__(self, "_lo", lo[cols])
        object.__setattr__(self, "_span", hi[cols] - lo[cols])
        object.__setattr__(self, "_cols", cols)
        object.__setattr__(self, "_d", int(lo.size))
        key_words(self.n_cells)  # raises if the keys would be too wide

    @property
    def n_dims(self) -> int:
        """Number of grid dimensions ``d_g``."""
        return int(self._cols.size if self.projection is None else self.projection.shape[0])

    @property
    def n_cells(self) -> int:
        """``bins ** d_g`` (a Python int, possibly far beyond 64 bits)."""
        return int(int(self.bins) ** self.n_dims)

    @property
    def key_words(self) -> int:
        """63-bit words per sparse cell key (1 up to ``2**63`` cells)."""
        return key_words(self.n_cells)

    @property
    def strides(self) -> NDArray[np.int64]:
        """Row-major strides ``cell = sum(coords * strides)``; only grids of <= 2**63 cells."""
        if self.key_words != 1:
            raise ValueError(f"{self.n_cells} cells do not fit an int64 index; use cell keys")
        powers = [int(self.bins) ** (self.n_dims - 1 - i) for i in range(self.n_dims)]
        return np.array(powers, dtype=np.int64)

    def cell_coords(self, X: ArrayLike) -> NDArray[np.int64]:
        """Bin of every grid dimension, shape ``(n, d_g)``, values in ``[0, bins)``."""
        arr = np.asarray(X, dtype=np.float64)
        if arr.ndim != 2 or arr.shape[1] != self._d:
            raise ValueError(f"X must have shape (n, {self._d}), got {arr.shape}")
        if np.any(np.isnan(arr[:, self._cols])):
            raise ValueError("X contains NaN")
        unit = np.clip((arr[:, self._cols] - self._lo) / self._span, 0.0, 1.0)
        if self.projection is not None:
            z = (unit - 0.5) @ self.projection.T
            unit = np.clip((z + PROJECTION_BOUND) / (2 * PROJECTION_BOUND), 0.0, 1.0)
        return np.minimum((unit * self.bins).astype(np.int64), self.bins - 1)

    def _groups(self) -> list[tuple[int, int]]:
        """``(first dim, size)`` of the int64 partial indices (``bins ** size <= 2**62``)."""
        b, g = int(self.bins), 1
        while b ** (g + 1) <= 2**62 and g < self.n_dims:
            g += 1
        return [(s, min(g, self.n_dims - s)) for s in range(0, self.n_dims, g)]

    def keys_of(self, coords: ArrayLike) -> NDArray[np.int64]:
        """Keys ``(n, W)`` of cell coordinates ``(n, d_g)`` (row-major cell index)."""
        c = np.asarray(coords, dtype=np.int64).reshape(-1, self.n_dims)
        if self.key_words == 1:
            return (c @ self.strides).reshape(-1, 1)
        b = int(self.bins)
        groups = self._groups()
        parts = np.stack([c[:, s:s + n] @ (b ** np.arange(n - 1, -1, -1)) for s, n in groups],
                         axis=1).tolist()
        values = []
        for row in parts:
            v = 0
            for part, (_, n) in zip(row, groups, strict=True):
                v = v * b**n + part
            values.append(v)
        return keys_from_ints(values, self.key_words)

    def coords_of(self, keys: ArrayLike) -> NDArray[np.int64]:
        """Inverse of :meth:`keys_of`: keys (or 1-d int64 cell indices) to coordinates."""
        k = np.asarray(keys, dtype=np.int64)
        if self.key_words == 1:
            return (k.reshape(-1, 1) // self.strides) % self.bins
        b, groups = int(self.bins), self._groups()
        cells = ints_from_keys(k)
        parts = np.empty((len(cells), len(groups)), dtype=np.int64)
        for r, v in enumerate(cells):
            for j in range(len(groups) - 1, -1, -1):
                v, parts[r, j] = divmod(v, b ** groups[j][1])
        out = np.empty((len(cells), self.n_dims), dtype=np.int64)
        for j, (s, n) in enumerate(groups):
            out[:, s:s + n] = (parts[:, j, None] // b ** np.arange(n - 1, -1, -1)) % b
        return out

    def cell_index(self, X: ArrayLike) -> NDArray[np.int64]:
        """Row-major cell index of every row, shape ``(n,)`` int64 (grids of <= 2**63 cells)."""
        return self.cell_coords(X) @ self.strides

    def unique_coords(
        self, X: ArrayLike
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.intp]]:
        """Occupied cells' coordinates in row-major order, their row counts, each row's cell."""
        # rows as fixed-width big-endian bytes: byte order is row-major cell order, and
        # sorting a 1-d void array is far faster than np.unique(axis=0)
        small = np.ascontiguousarray(self.cell_coords(X).astype(">u1" if self.bins <= 256
                                                              else ">u2"))
        rows = small.view(f"V{small.dtype.itemsize * self.n_dims}").ravel()
        cells, inverse, n = np.unique(rows, return_inverse=True, return_counts=True)
        coords = np.frombuffer(cells.tobytes(), dtype=small.dtype).reshape(-1, self.n_dims)
        return coords.astype(np.int64), n.astype(np.int64), inverse.ravel()

    def occupied(self, X: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Sparse counts: sorted keys ``(K, W)`` of the non-empty cells and their row counts."""
        cells, n, _ = self.unique_coords(X)
        return self.keys_of(cells), n

    def counts(self, X: ArrayLike) -> dict[int, int]:
        """Sparse counts: non-empty cell index (Python int) -> number of rows."""
        keys, n = self.occupied(X)
        return dict(zip(ints_from_keys(keys), n.tolist(), strict=True))

    def dense_counts(self, X: ArrayLike) -> NDArray[np.int64]:
        """Counts of every cell, shape ``(n_cells,)``; only for grids of at most 5e7 cells."""
        if self.n_cells > DENSE_LIMIT:
            raise ValueError(f"{self.n_cells} cells is too many for a dense count vector")
        return np.bincount(self.cell_index(X), minlength=self.n_cells).astype(np.int64)

