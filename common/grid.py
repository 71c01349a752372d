"""Uniform grid on public bounds, the partition behind DP grid k-NN.

Each used feature ``i`` is mapped onto ``[0, 1]`` with the study's *public* bounds,
``u = (x_i - lo_i) / (hi_i - lo_i)`` clipped to ``[0, 1]`` (never with data statistics,
which would leak), and split into ``bins`` equal intervals; the last interval is closed so
that ``x_i = hi_i`` falls in bin ``bins - 1``. Cells are numbered row-major over the used
features (Rauch, Olatunji & Khosla, "Achieving differential privacy for k-NN based outlier
detection by data partitioning", section 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

MAX_CELLS = 2**62
DENSE_LIMIT = 50_000_000


@dataclass(frozen=True, eq=False)
class GridSpec:
    """A ``bins ** d_g`` uniform grid over the features ``features`` (all when ``None``).

    ``lo`` and ``hi`` are the public bounds of *all* schema features; ``features`` picks the
    columns the grid uses.
    """

    lo: ArrayLike
    hi: ArrayLike
    bins: int
    features: tuple[int, ...] | None = None
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
        if int(self.bins) < 1:
            raise ValueError(f"bins must be >= 1, got {self.bins}")
        if self.features is None:
            cols = np.arange(lo.size, dtype=np.intp)
        else:
            cols = np.array(self.features, dtype=np.intp)
            if cols.size == 0 or np.any(cols < 0) or np.any(cols >= lo.size):
                raise ValueError(f"features must index 0..{lo.size - 1}, got {self.features}")
            if np.unique(cols).size != cols.size:
                raise ValueError("features must not repeat")
        if int(self.bins) ** int(cols.size) >= MAX_CELLS:
            raise ValueError(
                f"grid of {self.bins}**{cols.size} cells is too large (limit 2**62);"
                " use fewer bins or name a subset of features"
            )
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)
        object.__setattr__(self, "_lo", lo[cols])
        object.__setattr__(self, "_span", hi[cols] - lo[cols])
        object.__setattr__(self, "_cols", cols)
        object.__setattr__(self, "_d", int(lo.size))

    @property
    def n_dims(self) -> int:
        """Number of grid dimensions ``d_g``."""
        return int(self._cols.size)

    @property
    def n_cells(self) -> int:
        return int(int(self.bins) ** self.n_dims)

    @property
    def strides(self) -> NDArray[np.int64]:
        """Row-major strides: ``cell = sum(coords * strides)``."""
        powers = [int(self.bins) ** (self.n_dims - 1 - i) for i in range(self.n_dims)]
        return np.array(powers, dtype=np.int64)

    def cell_coords(self, X: ArrayLike) -> NDArray[np.int64]:
        """Bin of every used feature, shape ``(n, d_g)``, values in ``[0, bins)``."""
        arr = np.asarray(X, dtype=np.float64)
        if arr.ndim != 2 or arr.shape[1] != self._d:
            raise ValueError(f"X must have shape (n, {self._d}), got {arr.shape}")
        if np.any(np.isnan(arr[:, self._cols])):
            raise ValueError("X contains NaN")
        unit = np.clip((arr[:, self._cols] - self._lo) / self._span, 0.0, 1.0)
        return np.minimum((unit * self.bins).astype(np.int64), self.bins - 1)

    def coords_of(self, cells: ArrayLike) -> NDArray[np.int64]:
        """Inverse of the row-major numbering: cell indices to ``(n, d_g)`` coordinates."""
        idx = np.asarray(cells, dtype=np.int64).ravel()
        return (idx[:, None] // self.strides) % self.bins

    def cell_index(self, X: ArrayLike) -> NDArray[np.int64]:
        """Row-major cell index of every row, shape ``(n,)`` int64."""
        return self.cell_coords(X) @ self.strides

    def occupied(self, X: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Sparse counts as arrays: the sorted non-empty cell indices and their row counts."""
        cells, n = np.unique(self.cell_index(X), return_counts=True)
        return cells.astype(np.int64), n.astype(np.int64)

    def counts(self, X: ArrayLike) -> dict[int, int]:
        """Sparse counts: non-empty cell index -> number of rows."""
        cells, n = self.occupied(X)
        return {int(c): int(k) for c, k in zip(cells, n, strict=True)}

    def dense_counts(self, X: ArrayLike) -> NDArray[np.int64]:
        """Counts of every cell, shape ``(n_cells,)``; only for grids of at most 5e7 cells."""
        if self.n_cells > DENSE_LIMIT:
            raise ValueError(f"{self.n_cells} cells is too many for a dense count vector")
        return np.bincount(self.cell_index(X), minlength=self.n_cells).astype(np.int64)
