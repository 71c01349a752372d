"""Honest noisy secure vectors for tests: exact histograms of uniform data (clipped) plus one
member's Pólya noise share, so a revealed sum passes :mod:`common.secagg.checks`."""

from __future__ import annotations

import numpy as np

from common.noise import sample_noise_share
from common.secagg.vector import noisy_secure_vector
from common.study.config import StudyConfig


def honest_vector(config: StudyConfig, rng: np.random.Generator, rows: int = 50) -> np.ndarray:
    """One member's noisy vector (LSH tables, then the dense grid if the study has one)."""
    X = rng.uniform(0, 1, size=(rows, len(config.features)))
    grid = config.grid_spec()
    return noisy_secure_vector(
        config, config.lsh_family().histogram(X),
        None if grid is None else grid.dense_counts(X), sample_noise_share)
