"""The detectors every API test runs over: add one here and it gets the whole suite
(``test_detector_api.py``, ``test_detector_sklearn_checks.py``); and :class:`PyODTwin`, PyOD's
own base class around one of them, the oracle of ``test_same_as_pyod``."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from pyod.models.base import BaseDetector as PyODBaseDetector

from common.detectors import BaseDetector, CentroidDetector, GridKNN, LSHiTables

LO, HI = [-10.0, -10.0], [10.0, 10.0]  # public bounds of generate_data's two features
DETECTORS: dict[str, Callable[..., BaseDetector]] = {
    "lsh": partial(LSHiTables, n_tables=30, sample_size=64, random_state=42),
    "lsh-seeded": partial(LSHiTables, n_tables=30, sample_size=64, seed=b"\x07" * 32,
                          lo=np.array(LO), hi=np.array(HI), subsample=False, scoring="mass"),
    "lsh-private": partial(LSHiTables, n_tables=30, lo=LO, hi=HI, epsilon=30, random_state=42),
    "grid": partial(GridKNN, bins=6, k=5, max_depth=2),
    "grid-basic": partial(GridKNN, bins=6, k=5, max_depth=2, weighted=False),
    "grid-private": partial(GridKNN, bins=6, k=5, max_depth=2, lo=LO, hi=HI, epsilon=4),
    "centroid": partial(CentroidDetector, n_clusters=4, random_state=42),
    # epsilon 300: at 30 the noise on 200 rows moves the centres enough that test_predict_rank's
    # tie tolerance failed in 2 of 100 fits (0 of 300 fits at 100 and 300)
    "centroid-private": partial(CentroidDetector, n_clusters=4, lo=LO, hi=HI, epsilon=300,
                                random_state=42),
}


class PyODTwin(PyODBaseDetector):
    """A genuine PyOD detector whose model is a fedod detector: PyOD's own base class then
    computes threshold, labels, probabilities, confidence, ranks and rejection."""

    def __init__(self, det: BaseDetector, X_train: np.ndarray) -> None:
        super().__init__(contamination=det.contamination)
        self.det = det
        self._set_n_classes(None)
        self.decision_scores_ = det.decision_function(X_train)
        self._process_decision_scores()

    def fit(self, X: Any, y: Any = None) -> PyODTwin:
        raise NotImplementedError

    def decision_function(self, X: Any) -> np.ndarray:
        return self.det.decision_function(X)
