"""Outlier detectors following PyOD's contract: LSH iTables, DP grid k-NN and cohort centroids.

The detector classes load scikit-learn; they are imported on first access, so the pure
score combination (:mod:`common.detectors.combine`) can be imported without it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from common.detectors.base import BaseDetector, NotFittedError
    from common.detectors.centroid import CentroidDetector
    from common.detectors.grid_knn import GridKNN
    from common.detectors.lsh_itables import LSHiTables

__all__ = ["BaseDetector", "CentroidDetector", "GridKNN", "LSHiTables", "NotFittedError"]
_HOME = {"BaseDetector": "base", "NotFittedError": "base", "CentroidDetector": "centroid",
         "GridKNN": "grid_knn", "LSHiTables": "lsh_itables"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value
