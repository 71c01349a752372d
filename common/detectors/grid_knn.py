"""Grid k-NN outlier detection over (noisy) uniform-grid counts (Rauch et al., Algorithm 1).

Rauch, Olatunji & Khosla, "Achieving differential privacy for k-NN based outlier detection by
data partitioning": the records are counted in a uniform grid (``common.histograms.grid.GridSpec``)
and a point ``y`` is scored by visiting the cells around its own cell in order of L1 distance
``t = 0, 1, ..., max_depth`` (in cells) and accumulating their counts until ``k`` records are
covered.

- basic: the score is the distance ``t`` of the last cell visited;
- weighted: ``(1/k) * sum_t t * n_t`` where ``n_t`` records are taken from distance ``t``,
  exactly ``k`` in total (the last cell only partially).

If fewer than ``k`` records lie within ``max_depth``, the missing records count as distance
``max_depth + 1`` (basic: the score is ``max_depth + 1``), the documented maximum.
With ``bins``, ``k`` or ``projection="auto"`` left to it, the public rule
(:func:`common.detectors.rules.grid_rule`) chooses them from ``d`` and the declared records.
Noisy counts are clamped at 0 before the walk (the walk itself:
:func:`common.detectors.grid_scores.knn_grid_scores`); rows sharing a cell are scored once.

Private mode (``epsilon`` set, standalone ``fit``) releases the counts with
``common.histograms.release.release_grid`` (sensitivity 1): up to ``cell_limit`` cells every cell of
the dense grid gets discrete Laplace noise of scale ``1 / epsilon`` (pure epsilon-DP); a larger
grid (e.g. 4 bins over many features) is released sparsely with the thresholded
mechanism and needs ``delta`` > 0. Merged releases enter through ``GridKNN.from_counts``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Literal, Self

import numpy as np
from numpy.typing import ArrayLike, NDArray

from common.detectors.base import BaseDetector, NotFittedError, as_matrix
from common.detectors.grid_scores import knn_grid_scores
from common.detectors.rules import GridChoice, grid_rule
from common.histograms.cellkeys import as_keys, ints_from_keys, keys_from_ints
from common.histograms.grid import GridSpec, derive_projection
from common.histograms.release import release_grid

Counts = NDArray[np.integer[Any]] | Mapping[int, int] | tuple[ArrayLike, ArrayLike]


def _sparse(spec: GridSpec, counts: Counts) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Keys ``(K, W)`` of the cells with a positive count and their counts (clamped at 0)."""
    words = spec.key_words
    if isinstance(counts, Mapping):
        idx = keys_from_ints((int(c) for c in counts), words)
        val = np.fromiter(counts.values(), dtype=np.int64, count=len(counts))
    elif isinstance(counts, tuple):
        idx = as_keys(counts[0], words)
        val = np.asarray(counts[1], dtype=np.int64).ravel()
    else:
        dense = np.asarray(counts)
        if words != 1 or dense.ndim != 1 or dense.shape[0] != spec.n_cells:
            raise ValueError(f"dense counts must have shape ({spec.n_cells},), got {dense.shape}")
        val = dense.astype(np.int64)
        idx = np.arange(spec.n_cells, dtype=np.int64).reshape(-1, 1)
    if idx.shape != (val.size, words):
        raise ValueError(f"expected {val.size} cell keys of {words} word(s), got {idx.shape}")
    keep = val > 0
    idx, val = idx[keep], val[keep]
    if idx.size:
        top = int(idx.max()) if words == 1 else max(ints_from_keys(idx))
        if idx.min() < 0 or top >= spec.n_cells:
            raise ValueError(f"cell indices must lie in [0, {spec.n_cells})")
    return idx, val


class GridKNN(BaseDetector):
    """Basic or weighted k-NN over uniform grid counts (Rauch et al.), optionally private.

    Parameters
    ----------
    bins : int, optional
        Intervals per grid dimension; ``None``: :func:`common.detectors.rules.grid_rule`.
    k : int, optional
        Records to cover; ``None``: the rule's ``max(10, N / 100)``.
    max_depth : int
        Largest L1 cell distance visited (``delta_max``).
    weighted : bool
        Weighted k-NN (count-weighted mean distance) instead of basic (last distance).
    lo, hi : array-like of shape (d,), optional
        Public bounds; required when ``epsilon`` is set, else the data's min/max (local only).
    features : tuple of int, optional
        Columns the grid uses (all when ``None``).
    projection : int, "auto" or None
        Build the grid over this many random ``+-1`` projections of the used features
        (``common.histograms.grid.derive_projection``), derived from ``seed``, never from the data;
        ``None``: the features themselves; ``"auto"`` (default): the rule's choice (the
        features up to 10 of them, else 6 projections).
    expected_records : int, optional
        Public, declared record count the rule sizes ``k`` by. Without it a non-private
        ``fit`` uses the rows it is given (a local model, never released) and a private one
        the rule's smallest ``k`` (10): a private grid's shape never depends on the rows.
    seed : bytes or hex str, optional
        Public seed of the projection (a study's ``lsh.seed``); ``None`` derives one from
        ``random_state``.
    epsilon : Decimal | int | str, optional
        Privacy budget of the release (noise scale ``1 / epsilon``); ``None``: exact counts.
    delta : Decimal | str, optional
        Delta of a sparse release (grids of more than ``cell_limit`` cells); 0/None: dense only.
    cell_limit : int
        Largest grid released densely.
    contamination : float
    random_state : int, optional
        Accepted for the PyOD contract; the noise comes from OpenDP's secure source.

    Attributes
    ----------
    spec_ : GridSpec
    k_ : int, the ``k`` in force
    cells_ : ndarray (K,) int64, the non-empty cells after clamping
    cell_counts_ : ndarray (K,) int64
    decision_scores_, threshold_, labels_ : as in PyOD
    """

    def __init__(
        self,
        bins: int | None = None,
        k: int | None = None,
        max_depth: int = 3,
        weighted: bool = True,
        *,
        lo: ArrayLike | None = None,
        hi: ArrayLike | None = None,
        features: tuple[int, ...] | None = None,
        projection: int | Literal["auto"] | None = "auto",
        expected_records: int | None = None,
        seed: bytes | str | None = None,
        epsilon: Decimal | int | str | None = None,
        delta: Decimal | str | None = None,
        cell_limit: int = 1_000_000,
        contamination: float = 0.1,
        random_state: int | None = None,
    ) -> None:
        super().__init__(contamination=contamination)
        self.bins = bins
        self.k = k
        self.max_depth = max_depth
        self.weighted = weighted
        self.lo = lo
        self.hi = hi
        self.features = features
        self.projection = projection
        self.expected_records = expected_records
        self.seed = seed
        self.epsilon = epsilon
        self.delta = delta
        self.cell_limit = cell_limit
        self.random_state = random_state

    def _check_params(self, k: int | None = None) -> None:
        self._check_contamination()
        k = self.k if k is None else k
        if k is not None and k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if self.max_depth < 0:
            raise ValueError(f"max_depth must be >= 0, got {self.max_depth}")

    def _rule(self, n_rows: int, d_used: int) -> GridChoice | None:
        """The rule's choice when any parameter is left to it, from public inputs only."""
        if self.bins is not None and self.k is not None and self.projection != "auto":
            return None
        records = self.expected_records
        if records is None:  # private: never the row count (it would shape the release)
            records = n_rows if self.epsilon is None else 1
        return grid_rule(d=d_used, expected_records=records, epsilon=self.epsilon,
                         delta=self.delta or "1e-6", cell_limit=self.cell_limit)

    def _projection(self, d_used: int, count: int | None) -> NDArray[np.float64] | None:
        if count is None:
            return None
        if self.seed is None:
            seed = hashlib.sha256(f"fedod-grid-knn/{self.random_state or 0}".encode()).digest()
        else:
            seed = bytes.fromhex(self.seed) if isinstance(self.seed, str) else self.seed
        return derive_projection(seed, d_used, int(count))

    def _spec(self, X: NDArray[np.float64]) -> GridSpec:
        if self.lo is None or self.hi is None:
            if self.epsilon is not None:
                raise ValueError(
                    "a private GridKNN needs public bounds lo and hi; bounds taken from the"
                    " data would leak"
                )
            lo = X.min(axis=0)
            hi = np.where(X.max(axis=0) > lo, X.max(axis=0), lo + 1.0)
        else:
            lo, hi = np.asarray(self.lo), np.asarray(self.hi)
        d_used = X.shape[1] if self.features is None else len(self.features)
        rule = self._rule(X.shape[0], d_used)
        bins = self.bins if self.bins is not None else rule.bins if rule else 4
        count = rule.projection if self.projection == "auto" and rule else self.projection
        self.k_ = self.k if self.k is not None else rule.k if rule else 10
        return GridSpec(lo, hi, bins, self.features,
                        self._projection(d_used, None if count == "auto" else count))

    def fit(self, X: ArrayLike, y: Any = None) -> Self:
        """Count ``X`` in the grid (noised when private); returns ``self``."""
        self._check_params()
        arr = as_matrix(X)
        spec = self._spec(arr)
        counts: Counts
        if self.epsilon is None:
            counts = spec.occupied(arr)
        else:
            sparse = spec.n_cells > self.cell_limit
            if sparse and not self.delta:
                raise ValueError(
                    f"grid has {spec.n_cells} cells > cell_limit {self.cell_limit}, so it is"
                    " released sparsely (thresholded) and needs delta > 0, e.g. '1e-6'"
                )
            out = release_grid(spec, arr, self.epsilon, (self.delta or 0) if sparse else 0,
                               self.cell_limit)
            counts = out.values if out.indices is None else (out.indices, out.values)
        self._set_model(spec, counts)
        self._calibrate_later(arr)
        return self

    @classmethod
    def from_counts(
        cls,
        spec: GridSpec,
        counts: Counts,
        *,
        k: int = 10,
        max_depth: int = 3,
        weighted: bool = True,
        X: ArrayLike | None = None,
        contamination: float = 0.1,
    ) -> GridKNN:
        """Detector over given (e.g. merged, noisy) grid counts.

        ``counts`` is a dense ``(n_cells,)`` vector, a ``{cell: count}`` mapping or a pair
        ``(indices, values)``. When ``X`` is given, ``threshold_`` is set from its scores.
        """
        det = cls(bins=spec.bins, k=k, max_depth=max_depth, weighted=weighted, lo=spec.lo,
                  hi=spec.hi, features=spec.features, contamination=contamination,
                  projection=None if spec.projection is None else spec.projection.shape[0])
        det._check_params()
        det.k_ = k
        det._set_model(spec, counts)
        if X is not None:
            det.calibrate(X)
        return det

    def _set_model(self, spec: GridSpec, counts: Counts) -> None:
        cells, values = _sparse(spec, counts)
        self.spec_ = spec
        self.cells_ = cells
        self.cell_counts_ = values
        coords = spec.coords_of(cells)
        small: NDArray[np.integer[Any]] = coords.astype(np.uint8 if spec.bins <= 256 else np.uint16)
        self.cell_coords_ = small

    def decision_function(self, X: ArrayLike) -> NDArray[np.float64]:
        """Algorithm 1 score of each row; higher = more outlying, at most ``max_depth + 1``."""
        if not hasattr(self, "spec_"):
            raise NotFittedError("GridKNN is not fitted: call fit or from_counts")
        cells, _, inverse = self.spec_.unique_coords(self._check_input(X))
        scores = knn_grid_scores(cells, self.cell_coords_, self.cell_counts_, k=self.k_,
                                 max_depth=self.max_depth, weighted=self.weighted,
                                 bins=self.spec_.bins)
        return scores[inverse]
