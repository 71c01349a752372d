"""Outlier detectors following PyOD's contract: LSH iTables and DP grid k-NN."""

from common.detectors.base import BaseDetector, NotFittedError
from common.detectors.grid_knn import GridKNN
from common.detectors.lsh_itables import LSHiTables

__all__ = ["BaseDetector", "GridKNN", "LSHiTables", "NotFittedError"]
