"""The detector contract shared by LSH iTables and grid k-NN (PyOD's ``BaseDetector``).

``__init__`` only stores hyperparameters; ``fit(X)`` returns ``self`` and sets the fitted
attributes (names end in ``_``); ``decision_function(X)`` returns scores where *higher means
more outlying*; ``predict(X)`` returns 1 for outliers using ``threshold_``, the
``1 - contamination`` quantile of the training scores ``decision_scores_``.

The training scores, ``threshold_`` and ``labels_`` are computed on first access, not inside
``fit``: building the model is cheap, scoring every training row is not, and a caller that
only scores new rows should not pay for it. Until then the detector keeps a reference to the
training rows (no copy).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike, NDArray


def as_matrix(X: ArrayLike) -> NDArray[np.float64]:
    """``X`` as a non-empty, finite 2-D float64 array, or a ValueError saying what is wrong."""
    arr = np.asarray(X, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise ValueError(f"X must be a non-empty 2-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("X contains NaN or infinite values")
    return arr


class NotFittedError(RuntimeError):
    """The detector has no model yet: call ``fit`` (or build it ``from_*``) first."""


class BaseDetector(ABC):
    """Common PyOD-style plumbing: thresholding, ``predict``, ``fit_predict``."""

    contamination: float
    _calibration_rows: NDArray[np.float64] | None = None
    _calibrated: tuple[NDArray[np.float64], float, NDArray[np.int64]] | None = None

    def __init__(self, contamination: float = 0.1) -> None:
        self.contamination = contamination

    @abstractmethod
    def fit(self, X: ArrayLike, y: Any = None) -> Self:
        """Build the model from ``X`` (``y`` is ignored, as in PyOD)."""

    @abstractmethod
    def decision_function(self, X: ArrayLike) -> NDArray[np.float64]:
        """Outlier scores of ``X``, higher = more outlying."""

    def _check_contamination(self) -> None:
        if not 0.0 < float(self.contamination) <= 0.5:
            raise ValueError(f"contamination must be in (0, 0.5], got {self.contamination}")

    def calibrate(self, X: ArrayLike) -> Self:
        """Set ``decision_scores_``, ``threshold_`` and ``labels_`` from the rows ``X``.

        ``fit`` calls this on its training data; a detector built from a merged histogram
        calls it on the participant's own records.
        """
        self._check_contamination()
        scores = self.decision_function(X)
        threshold = float(np.quantile(scores, 1.0 - float(self.contamination)))
        self._calibrated = (scores, threshold, (scores > threshold).astype(np.int64))
        self._calibration_rows = None
        return self

    def _calibrate_later(self, X: NDArray[np.float64]) -> None:
        """Remember the training rows; :meth:`calibrate` runs on first access."""
        self._check_contamination()
        self._calibrated = None
        self._calibration_rows = X

    def _calibration(self) -> tuple[NDArray[np.float64], float, NDArray[np.int64]]:
        if self._calibrated is None:
            if self._calibration_rows is None:
                raise AttributeError(f"{type(self).__name__} is neither fitted nor calibrated")
            self.calibrate(self._calibration_rows)
        assert self._calibrated is not None
        return self._calibrated

    @property
    def decision_scores_(self) -> NDArray[np.float64]:
        """Scores of the training (or calibration) rows."""
        return self._calibration()[0]

    @property
    def threshold_(self) -> float:
        """The ``1 - contamination`` quantile of ``decision_scores_``."""
        return self._calibration()[1]

    @property
    def labels_(self) -> NDArray[np.int64]:
        """1 for training rows above ``threshold_``."""
        return self._calibration()[2]

    def predict(self, X: ArrayLike) -> NDArray[np.int64]:
        """1 for rows scored above ``threshold_`` (outliers), 0 otherwise."""
        if not hasattr(self, "threshold_"):
            raise NotFittedError(f"{type(self).__name__} has no threshold_: fit or calibrate it")
        return (self.decision_function(X) > self.threshold_).astype(np.int64)

    def fit_predict(self, X: ArrayLike, y: Any = None) -> NDArray[np.int64]:
        """``fit(X)`` then the training labels ``labels_``."""
        return self.fit(X, y).labels_

    def get_params(self) -> dict[str, Any]:
        """Constructor arguments, as stored by ``__init__``."""
        return {k: v for k, v in vars(self).items() if not k.endswith("_") and
                not k.startswith("_")}
