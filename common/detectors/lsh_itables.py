"""LSH iTables: an ensemble of random-feature LSH count tables (Li & Pham).

Each of ``m`` tables counts records per RF-LSH bucket (``common.histograms.hashing``). The paper's
score is ``s(q) = mean_j log2(max(C_j[g_j(q)], 1))``, small = few similar records = outlying; the
detector returns ``-s(q)`` so that higher means more outlying (PyOD convention).

Modes
-----
- Non-private (``epsilon=None``): as in the paper, each table may count a subsample of
  ``sample_size`` records (``subsample=True``), and the bounds may come from the data when no
  public bounds are given. This model is local and never released.
- Private (``epsilon`` set): every table counts *all* records, so the vector of all tables has
  L1 sensitivity ``m``; discrete Laplace noise of scale ``m / epsilon`` (OpenDP, via
  ``common.noise.laplace.add_discrete_laplace``) is added to every cell. Public bounds are required.
  The family is derived with ``private_sample_size`` (default 16: 2 to 4 bits per table;
  under noise, few full cells beat many sparse ones, see the ablation in BENCHMARKS.md).
- From a merged histogram (``LSHiTables.from_histogram``): how a participant scores with the
  global model, the cell-wise sum of the participants' noisy releases.

Scoring of noisy counts is post-processing, so it costs no privacy:
every table counts the same records, so the table totals are all noisy copies of one total
``N``. ``N`` is estimated by the inverse-variance weighted mean of the table sums, each table
is shifted (least squares) to sum to that estimate, cells are clamped at 0 and divided by it.
``scoring="mass"`` then scores the mean bucket *mass* ``-mean_j C'_j[g_j(q)] / N`` --
linear, so the independent cell noise averages out over the tables instead of being amplified
by the logarithm near zero; ``scoring="log"`` the paper's ``-mean_j log2(max(C'_j, 1))`` of
the corrected counts ``C'``, better once the cells' counts stand clear of the noise (the
public rule, :mod:`common.detectors.rules`, picks it from the noise level).
"""

from __future__ import annotations

import hashlib
import os
from decimal import Decimal
from typing import Any, Literal, Self

import numpy as np
from numpy.typing import ArrayLike, NDArray

from common.detectors.base import BaseDetector, NotFittedError, as_matrix
from common.detectors.lsh_kernel import scorer
from common.histograms.hashing import LSHFamily, derive_lsh_family
from common.noise.laplace import add_discrete_laplace

Scoring = Literal["log", "mass"]
PRIVATE_SAMPLE_SIZE = 16


def _seed_from(random_state: int | None) -> bytes:
    if random_state is None:
        return os.urandom(32)
    return hashlib.sha256(b"fedod-lsh-seed/1\x00" + str(int(random_state)).encode()).digest()


def column_bounds(X: NDArray[np.float64], rows: int = 64
                  ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Per-column min and max, as ``X.min(axis=0), X.max(axis=0)`` (min and max are exact
    in any order), about 6x faster on a tall, narrow ``X``: ``rows`` rows at a time are
    viewed as one long row, so numpy reduces long contiguous runs."""
    n, d = X.shape
    whole = n - n % rows
    lo, hi = X[whole:].min(axis=0, initial=np.inf), X[whole:].max(axis=0, initial=-np.inf)
    if whole and X.flags.c_contiguous:
        wide = X[:whole].reshape(-1, rows * d)
        lo = np.minimum(lo, wide.min(axis=0).reshape(rows, d).min(axis=0))
        hi = np.maximum(hi, wide.max(axis=0).reshape(rows, d).max(axis=0))
    elif whole:
        lo = np.minimum(lo, X[:whole].min(axis=0))
        hi = np.maximum(hi, X[:whole].max(axis=0))
    return lo, hi


def cell_scores(family: LSHFamily, counts: ArrayLike, scoring: Scoring) -> NDArray[np.float64]:
    """Per-cell score contribution (higher = more normal) from a flat count vector.

    Noisy counts are first made total-consistent (module docstring: each table shifted to
    the common total, clamped at 0); exact counts, whose tables all hold the same total, are
    used as they are. ``"log"``: the paper's ``log2(max(C, 1))`` of those counts.
    ``"mass"``: each cell's fraction of the total.
    """
    c = np.asarray(counts, dtype=np.float64).ravel()
    if c.shape[0] != family.n_cells:
        raise ValueError(f"counts must have {family.n_cells} cells, got {c.shape[0]}")
    if scoring not in ("log", "mass"):
        raise ValueError(f"scoring must be 'log' or 'mass', got {scoring!r}")
    sizes = np.left_shift(1, family.n_bits.astype(np.int64)).astype(np.float64)
    sums = np.add.reduceat(c, family.offsets[:-1])
    if np.all(sums == sums[0]):  # exact counts: every table holds the same N, no shift
        total, corrected = max(float(sums[0]), 1.0), c
    else:
        weights = 1.0 / sizes
        total = max(float(np.sum(sums * weights) / np.sum(weights)), 1.0)
        shift = np.repeat((total - sums) / sizes, sizes.astype(np.int64))
        corrected = np.maximum(c + shift, 0.0)
    if scoring == "log":
        return np.log2(np.maximum(corrected, 1.0))
    return np.maximum(corrected, 0.0) / total


def _subsample_histogram(
    family: LSHFamily, arr: NDArray[np.float64], rows: NDArray[np.int64]
) -> NDArray[np.int64]:
    """Flat histogram where table ``j`` counts only the rows ``rows[j]`` (the paper's
    subsampling; non-private use only). Hashes each table on its own sample."""
    width = family.features.shape[1]
    if arr.flags.c_contiguous:  # one gather by flat position
        values = arr.ravel()[rows[:, :, None] * arr.shape[1] + family.features[:, None, :]]
    else:
        values = arr[rows[:, :, None], family.features[:, None, :]]
    bits = values >= family.cuts[:, None, :]  # (m, s, L); unused slots: cut +inf -> 0
    weights = np.ldexp(1.0, np.arange(width))  # exact in float64: width <= 40 bits
    flat = (bits @ weights).astype(np.int64) + family.offsets[:-1, None]
    return np.bincount(flat.ravel(), minlength=family.n_cells).astype(np.int64)


class LSHiTables(BaseDetector):
    """LSH iTables outlier detector (Li & Pham), optionally differentially private.

    Parameters
    ----------
    n_tables : int
        Number of hash tables ``m`` (paper: 100).
    sample_size : int
        Expected table size ``s`` of the paper: sets the table sizes and, with
        ``subsample=True``, the number of records each table counts (non-private only).
    lo, hi : array-like of shape (d,), optional
        Public per-feature bounds for the cuts. Required when ``epsilon`` is set; otherwise
        the training data's min/max are used (local only).
    seed : bytes, optional
        Hash-family seed; by default derived from ``random_state``.
    subsample : bool
        Non-private only: each table counts ``sample_size`` records drawn without
        replacement (the paper). Ignored when ``epsilon`` is set (all records are counted).
    epsilon : Decimal | int | str, optional
        Privacy budget of the release; ``None`` for the exact, non-private model.
    private_sample_size : int
        Expected table size ``s`` used to derive the family when ``epsilon`` is set.
    scoring : {"log", "mass"}, optional
        Cell scoring; ``None`` picks ``"log"`` (paper) without noise and ``"mass"`` with it.
    contamination : float
        Expected fraction of outliers, sets ``threshold_``.
    random_state : int, optional
        Seeds the subsampling and, without ``seed``, the hash family.

    Attributes
    ----------
    family_ : LSHFamily
    histograms_ : ndarray of shape (n_cells,), int64 (noisy when private)
    cell_scores_ : ndarray of shape (n_cells,), float64
    decision_scores_, threshold_, labels_ : as in PyOD
    """

    def __init__(
        self,
        n_tables: int = 100,
        sample_size: int = 1000,
        *,
        lo: ArrayLike | None = None,
        hi: ArrayLike | None = None,
        seed: bytes | None = None,
        subsample: bool = True,
        epsilon: Decimal | int | str | None = None,
        private_sample_size: int = PRIVATE_SAMPLE_SIZE,
        scoring: Scoring | None = None,
        contamination: float = 0.1,
        random_state: int | None = None,
    ) -> None:
        super().__init__(contamination=contamination)
        self.n_tables = n_tables
        self.sample_size = sample_size
        self.lo = lo
        self.hi = hi
        self.seed = seed
        self.subsample = subsample
        self.epsilon = epsilon
        self.private_sample_size = private_sample_size
        self.scoring = scoring
        self.random_state = random_state

    def _derive(self, X: NDArray[np.float64]) -> LSHFamily:
        if self.lo is None or self.hi is None:
            if self.epsilon is not None:
                raise ValueError(
                    "a private LSHiTables needs public bounds lo and hi; bounds taken from"
                    " the data would leak"
                )
            lo, hi = column_bounds(X)
        else:
            lo, hi = np.asarray(self.lo), np.asarray(self.hi)
        seed = self.seed if self.seed is not None else _seed_from(self.random_state)
        size = self.sample_size if self.epsilon is None else self.private_sample_size
        return derive_lsh_family(seed, lo, hi, self.n_tables, size)

    def fit(self, X: ArrayLike, y: Any = None) -> Self:
        """Build (and, when private, noise) the tables from ``X``; returns ``self``."""
        self._check_contamination()
        arr = as_matrix(X)
        family = self._derive(arr)
        if self.epsilon is not None:
            counts = add_discrete_laplace(family.histogram(arr), family.n_tables, self.epsilon)
        elif self.subsample and arr.shape[0] > self.sample_size:
            rng = np.random.default_rng(self.random_state)
            n = arr.shape[0]
            rows = np.stack(
                [rng.choice(n, self.sample_size, replace=False) for _ in range(family.n_tables)]
            )
            counts = _subsample_histogram(family, arr, rows)
        else:
            counts = family.histogram(arr)
        self._set_model(family, counts, self.scoring or ("log" if self.epsilon is None
                                                          else "mass"))
        self._calibrate_later(arr)
        return self

    @classmethod
    def from_histogram(
        cls,
        family: LSHFamily,
        counts: ArrayLike,
        *,
        scoring: Scoring = "mass",
        X: ArrayLike | None = None,
        contamination: float = 0.1,
    ) -> LSHiTables:
        """Detector over a given (e.g. merged, noisy) flat histogram of ``family``.

        ``scoring="mass"`` suits noisy counts, ``"log"`` exact ones. When ``X`` (the caller's
        own records) is given, ``threshold_`` is set from their scores.
        """
        arr = np.asarray(counts)
        if arr.ndim != 1 or arr.shape[0] != family.n_cells:
            raise ValueError(f"counts must have shape ({family.n_cells},), got {arr.shape}")
        if not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"counts must be integers, got {arr.dtype}")
        det = cls(n_tables=family.n_tables, lo=family.lo, hi=family.hi, scoring=scoring,
                  contamination=contamination)
        det._set_model(family, arr.astype(np.int64), scoring)
        det.n_features_in_ = np.asarray(family.lo).shape[0]
        if X is not None:
            det.calibrate(X)
        return det

    def _set_model(self, family: LSHFamily, counts: NDArray[Any], scoring: Scoring) -> None:
        self.family_ = family
        self.histograms_ = np.asarray(counts, dtype=np.int64)
        self.cell_scores_ = cell_scores(family, self.histograms_, scoring)

    def _score(self, arr: NDArray[np.float64]) -> NDArray[np.float64]:
        fast = scorer(self.family_)
        if fast is not None:  # the same bucket indices, fewer passes (lsh_kernel)
            scores = fast.score(arr, self.cell_scores_)
        else:
            scores = np.empty(arr.shape[0], dtype=np.float64)
            for start, block in self.family_.iter_flat_index(arr):
                scores[start:start + block.shape[0]] = np.take(self.cell_scores_,
                                                               block).sum(axis=1)
        scores *= -1.0 / self.family_.n_tables
        return scores

    def decision_function(self, X: ArrayLike) -> NDArray[np.float64]:
        """Negated mean per-table cell score of each row; higher = more outlying."""
        if not hasattr(self, "family_"):
            raise NotFittedError("LSHiTables is not fitted: call fit or from_histogram")
        return self._score(self._check_input(X))
