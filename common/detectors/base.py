"""The detector contract shared by every fedod detector: PyOD's ``BaseDetector`` API on a
scikit-learn estimator.

A subclass implements ``__init__`` (hyperparameters only, stored under their own names),
``fit(X, y=None)`` (returns ``self``; fitted attributes end in ``_``; it hands the training
rows to :meth:`BaseDetector._calibrate_later`) and ``decision_function(X)`` (validating ``X``
with :meth:`BaseDetector._check_input`). Everything else comes from here:

- PyOD (``pyod.models.base.BaseDetector``): ``decision_scores_``, ``threshold_``, ``labels_``
  (and PyOD's ``_mu``/``_sigma``); ``predict(X, return_confidence=False)``;
  ``predict_proba(X, method="linear"|"unify", return_confidence=False)`` (any other method
  raises ValueError); ``predict_confidence``; ``predict_with_rejection`` and
  ``compute_rejection_stats``; ``_predict_rank``; ``fit_predict``. The formulas live in
  :mod:`common.detectors.calibration`.
- scikit-learn (``BaseEstimator``, ``OutlierMixin``): ``get_params(deep=...)``,
  ``set_params``, ``clone``, ``repr``, tags (``estimator_type == "outlier_detector"``),
  ``n_features_in_``, so a detector is a last step of a ``Pipeline`` and works in
  ``GridSearchCV``.

Score sign: PyOD's. ``decision_function`` and ``decision_scores_`` are *higher = more
outlying*, and ``predict`` returns 1 for an outlier, 0 for an inlier. scikit-learn's own
outlier detectors use the opposite: their ``score_samples``/``decision_function`` are lower
= more abnormal and their ``predict`` returns -1 for an outlier, 1 for an inlier. To feed a
tool that expects scikit-learn's convention, negate the scores; ROC AUC against labels
``y = 1`` for outliers (``scoring="roc_auc"``) works as it is.

The training scores, ``threshold_`` and ``labels_`` are computed on first access, not inside
``fit``: building the model is cheap, scoring every training row is not, and a caller that
only scores new rows should not pay for it. Until then the detector keeps a reference to the
training rows (no copy) in a small holder that is filled in place, so reading them does not
change the estimator's ``__dict__``. Pickling computes them first and drops the rows. The
contamination is the one in force at ``fit``.

PyOD differences: ``y`` given to ``fit`` is ignored silently (PyOD warns and sizes
``predict_proba`` by its classes; here it always has two columns), ``contamination`` is
validated in ``fit`` (scikit-learn's rule; PyOD checks it in ``__init__``) and must be a
number (no PyThresh thresholder objects), and the deprecated ``fit_predict_score`` is absent.
"""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from typing import Any, Literal, Self, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator, OutlierMixin
from sklearn.exceptions import NotFittedError as SklearnNotFittedError

import common.detectors.calibration as calibration
from common.detectors.calibration import Calibrated

Scores = NDArray[np.float64]
Labels = NDArray[np.int64]


def as_matrix(X: ArrayLike) -> NDArray[np.float64]:
    """``X`` as a non-empty, finite 2-D float64 array, or an error saying what is wrong."""
    if hasattr(X, "toarray") or hasattr(X, "tocsr"):
        raise TypeError("sparse input is not supported: pass a dense array (X.toarray())")
    arr = np.asarray(X)
    if np.iscomplexobj(arr):
        raise ValueError("Complex data not supported")
    arr = np.asarray(arr, dtype=np.float64)
    if arr.ndim != 2:  # scikit-learn's wording, which its estimator checks look for
        raise ValueError(f"X must be a 2-D array, got shape {arr.shape}: Reshape your data"
                         " with X.reshape(-1, 1) for one feature or X.reshape(1, -1) for"
                         " one sample")
    for axis, what in ((0, "sample"), (1, "feature")):
        if arr.shape[axis] == 0:
            raise ValueError(f"Found array with 0 {what}(s) (shape={arr.shape}) while a"
                             " minimum of 1 is required.")
    if not np.all(np.isfinite(arr)):
        raise ValueError("X contains NaN or infinite values")
    return arr


class NotFittedError(SklearnNotFittedError):  # type: ignore[misc]
    """The detector has no model (call ``fit``, or build it ``from_*``) or no threshold yet
    (call ``calibrate``). A scikit-learn ``NotFittedError`` (ValueError, AttributeError)."""


class _Lazy:
    """Training rows until their scores are needed, then the :class:`Calibrated` values."""

    __slots__ = ("rows", "contamination", "values")

    def __init__(self, rows: NDArray[np.float64] | None, contamination: float,
                 values: Calibrated | None = None) -> None:
        self.rows = rows
        self.contamination = contamination
        self.values = values


class BaseDetector(OutlierMixin, BaseEstimator, ABC):  # type: ignore[misc]
    """PyOD's detector API over scikit-learn's estimator API (see the module docstring)."""

    contamination: float
    _classes = 2  # PyOD's number of classes of predict_proba

    def __init__(self, contamination: float = 0.1) -> None:
        self.contamination = contamination

    @abstractmethod
    def fit(self, X: ArrayLike, y: Any = None) -> Self:
        """Build the model from ``X`` (``y`` is ignored, as in PyOD)."""

    @abstractmethod
    def decision_function(self, X: ArrayLike) -> Scores:
        """Outlier scores of ``X``, higher = more outlying."""

    # -- validation -------------------------------------------------------------------------

    def _check_contamination(self) -> float:
        c = self.contamination
        if isinstance(c, bool) or not isinstance(c, numbers.Real) or not 0.0 < c <= 0.5:
            raise ValueError(f"contamination must be a number in (0, 0.5], got {c!r}")
        return float(c)

    def _check_input(self, X: ArrayLike) -> NDArray[np.float64]:
        """``as_matrix(X)`` with as many columns as the model was fitted on."""
        arr = as_matrix(X)
        expected = getattr(self, "n_features_in_", None)
        if expected is not None and arr.shape[1] != expected:
            raise ValueError(f"X has {arr.shape[1]} features, but {type(self).__name__} is"
                             f" expecting {expected} features as input")
        return arr

    # -- training scores, threshold, labels -------------------------------------------------

    def _calibrate_later(self, X: NDArray[np.float64]) -> None:
        """Remember the training rows; the training scores are computed on first access."""
        self.n_features_in_ = X.shape[1]
        self._lazy = _Lazy(X, self._check_contamination())

    def calibrate(self, X: ArrayLike) -> Self:
        """Set ``decision_scores_``, ``threshold_`` and ``labels_`` from the rows ``X`` now.

        A detector built from a merged histogram (``from_histogram``/``from_counts``) calls
        this on the participant's own records.
        """
        contamination = self._check_contamination()
        scores = self.decision_function(X)
        if not hasattr(self, "n_features_in_"):
            self.n_features_in_ = as_matrix(X).shape[1]
        self._lazy = _Lazy(None, contamination, calibration.calibrate_scores(scores,
                                                                             contamination))
        return self

    @property
    def _calibrated(self) -> Calibrated | None:
        """The calibration if it has been computed, else None (nothing is computed)."""
        lazy: _Lazy | None = self.__dict__.get("_lazy")
        return None if lazy is None else lazy.values

    def _calibration(self) -> Calibrated:
        lazy: _Lazy | None = self.__dict__.get("_lazy")
        if lazy is None:
            raise NotFittedError(f"{type(self).__name__} has no training scores: fit it, or"
                                 " calibrate it on your own records")
        if lazy.values is None:
            assert lazy.rows is not None
            lazy.values = calibration.calibrate_scores(self.decision_function(lazy.rows),
                                                       lazy.contamination)
            lazy.rows = None
        return lazy.values

    def __getstate__(self) -> dict[str, Any]:
        if "_lazy" in self.__dict__:
            self._calibration()
        state: dict[str, Any] = super().__getstate__()
        return state

    @property
    def decision_scores_(self) -> Scores:
        """Scores of the training (or calibration) rows, higher = more outlying."""
        return self._calibration().scores

    @property
    def threshold_(self) -> float:
        """The ``1 - contamination`` percentile of ``decision_scores_``."""
        return self._calibration().threshold

    @property
    def labels_(self) -> Labels:
        """1 for training rows scored above ``threshold_``, 0 for the others."""
        return self._calibration().labels

    @property
    def _mu(self) -> float:
        return self._calibration().mu

    @property
    def _sigma(self) -> float:
        return self._calibration().sigma

    # -- PyOD's prediction API --------------------------------------------------------------

    def _scored(self, X: ArrayLike) -> tuple[Calibrated, Scores]:
        cal = self._calibration()
        return cal, self.decision_function(X)

    @overload
    def predict(self, X: ArrayLike, return_confidence: Literal[False] = ...) -> Labels: ...
    @overload
    def predict(self, X: ArrayLike, return_confidence: Literal[True]) -> tuple[Labels, Scores]:
        ...

    def predict(self, X: ArrayLike, return_confidence: bool = False
                ) -> Labels | tuple[Labels, Scores]:
        """1 for rows scored above ``threshold_`` (outliers), 0 otherwise; with
        ``return_confidence`` also :meth:`predict_confidence`."""
        cal, test = self._scored(X)
        labels = (test > cal.threshold).astype(np.int64)
        if return_confidence:
            return labels, calibration.confidence(cal, test)
        return labels

    def predict_proba(self, X: ArrayLike, method: str = "linear",
                      return_confidence: bool = False) -> Scores | tuple[Scores, Scores]:
        """``(n, 2)`` array ``[P(inlier), P(outlier)]``.

        ``method="linear"``: min-max scaling of the score on the training scores, clipped to
        [0, 1]; ``"unify"``: Gaussian scaling (Kriegel et al., 2011). Any other method raises
        ValueError. With ``return_confidence`` also :meth:`predict_confidence`.
        """
        convert = {"linear": calibration.linear_proba, "unify": calibration.unify_proba}
        if method not in convert:
            raise ValueError(f"{method!r} is not a valid probability conversion method:"
                             " use 'linear' or 'unify'")
        cal, test = self._scored(X)
        probs = convert[method](cal, test)
        if return_confidence:
            return probs, calibration.confidence(cal, test)
        return probs

    def predict_confidence(self, X: ArrayLike) -> Scores:
        """Confidence in [0, 1] that each row's label would stay the same under a slightly
        different training set (Perini et al., 2020)."""
        return calibration.confidence(*self._scored(X))

    def predict_with_rejection(
        self, X: ArrayLike, T: float = 32, return_stats: bool = False, delta: float = 0.1,
        c_fp: float = 1, c_fn: float = 1, c_r: float = -1,
    ) -> Labels | tuple[Labels, list[float]]:
        """``predict`` with -2 for rows whose confidence is at most ``1 - 2 exp(-T)``; with
        ``return_stats`` also ``[expected rate, upper bound of the rate, upper bound of the
        cost]`` (see :meth:`compute_rejection_stats`)."""
        cal, test = self._scored(X)
        labels = (test > cal.threshold).astype(np.int64)
        certainty = 2.0 * np.abs(calibration.confidence(cal, test) - 0.5)
        labels[certainty <= 1.0 - 2.0 * np.exp(-T)] = -2
        if return_stats:
            return labels, list(self.compute_rejection_stats(T, delta, c_fp, c_fn, c_r))
        return labels

    def compute_rejection_stats(
        self, T: float = 32, delta: float = 0.1, c_fp: float = 1, c_fn: float = 1,
        c_r: float = -1, verbose: bool = False,
    ) -> tuple[float, float, float]:
        """Expected rejection rate, its upper bound (with probability ``1 - delta``) and the
        upper bound of the cost, for :meth:`predict_with_rejection`."""
        stats = calibration.rejection_stats(self._calibration(), T, delta, c_fp, c_fn, c_r)
        if verbose:
            print("Expected rejection rate: {:.4f}\nUpper bound rejection rate: {:.4f}\n"
                  "Upper bound cost: {:.4f}".format(*stats))
        return stats

    def _predict_rank(self, X: ArrayLike, normalized: bool = False) -> Scores:
        """Rank of each row's score among the training scores (for score combination)."""
        cal, test = self._scored(X)
        return calibration.rank(cal, test, normalized)

    def fit_predict(self, X: ArrayLike, y: Any = None, **kwargs: Any) -> Labels:
        """``fit(X)`` then the training labels ``labels_`` (1 = outlier, PyOD's labels)."""
        return self.fit(X, y, **kwargs).labels_
