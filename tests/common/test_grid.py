"""Uniform grid on public bounds: clipping, row-major cell numbering, limits."""

from __future__ import annotations

import numpy as np
import pytest

from common.histograms.grid import GridSpec


@pytest.mark.parametrize(
    ("row", "coords"),
    [
        ([0.0, 0.0], [0, 0]),
        ([0.24, 2.6], [0, 1]),
        ([1.0, 10.0], [3, 3]),       # upper bound falls in the last bin
        ([-5.0, 99.0], [0, 3]),      # clipped to the public bounds
        ([0.5, 5.0], [2, 2]),
    ],
)
def test_cell_coords(row: list[float], coords: list[int]) -> None:
    spec = GridSpec([0.0, 0.0], [1.0, 10.0], bins=4)
    np.testing.assert_array_equal(spec.cell_coords(np.array([row])), [coords])


def test_row_major_index_and_inverse() -> None:
    spec = GridSpec([0, 0, 0], [1, 2, 3], bins=4, features=(0, 2))
    X = np.array([[0, 5, 3], [1, 0, 0], [0.3, 0, 1.6]])
    cells = spec.cell_index(X)
    assert cells.dtype == np.int64
    np.testing.assert_array_equal(cells, [3, 12, 6])
    np.testing.assert_array_equal(spec.coords_of(cells), spec.cell_coords(X))
    assert spec.n_cells == 16 and spec.n_dims == 2


def test_sparse_and_dense_counts_agree() -> None:
    spec = GridSpec(np.zeros(3), np.ones(3), bins=5)
    X = np.random.default_rng(0).random((500, 3))
    dense = spec.dense_counts(X)
    assert dense.sum() == 500 and dense.shape == (125,)
    sparse = spec.counts(X)
    assert all(v > 0 for v in sparse.values())
    np.testing.assert_array_equal(np.flatnonzero(dense), sorted(sparse))
    assert [dense[c] for c in sorted(sparse)] == [sparse[c] for c in sorted(sparse)]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lo": np.zeros(4033), "hi": np.ones(4033), "bins": 4}, "8064"),
        ({"lo": [0.0], "hi": [0.0], "bins": 4}, "< its upper"),
        ({"lo": [0.0], "hi": [np.nan], "bins": 4}, "finite"),
        ({"lo": [0.0], "hi": [1.0], "bins": 0}, "bins"),
        ({"lo": [0.0, 0.0], "hi": [1.0, 1.0], "bins": 2, "features": (0, 2)}, "features"),
        ({"lo": [0.0, 0.0], "hi": [1.0, 1.0], "bins": 2, "features": (1, 1)}, "repeat"),
    ],
)
def test_invalid_specs(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        GridSpec(**kwargs)  # type: ignore[arg-type]


def test_largest_allowed_grid() -> None:
    spec = GridSpec(np.zeros(61), np.ones(61), bins=2)
    assert spec.n_cells == 2**61
    assert spec.cell_index(np.ones((1, 61)))[0] == 2**61 - 1
    with pytest.raises(ValueError, match="too many"):
        spec.dense_counts(np.ones((1, 61)))
