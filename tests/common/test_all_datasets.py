"""No shared benchmark dataset makes a detector raise with its default settings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from common.detectors import CentroidDetector, GridKNN, LSHiTables

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets"
FILES = sorted(DATA.glob("*.npz")) if DATA.is_dir() else []
ROWS = 300


@pytest.mark.skipif(not DATA.is_dir(), reason=f"{DATA} is absent")
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
@pytest.mark.parametrize("make", [GridKNN, LSHiTables, CentroidDetector],
                         ids=["GridKNN", "LSHiTables", "CentroidDetector"])
def test_defaults_fit_and_score_every_dataset(path: Path, make: type) -> None:
    arrays = np.load(path)
    X = arrays["X"]
    rows = np.random.default_rng(0).choice(len(X), size=min(ROWS, len(X)), replace=False)
    det = make().fit(X[rows])
    scores = det.decision_function(X[rows])
    assert scores.shape == (rows.size,) and np.all(np.isfinite(scores))
    assert det.predict(X[rows[:10]]).shape == (10,)


def test_there_are_datasets() -> None:
    if DATA.is_dir():
        assert len(FILES) >= 10
