"""LSHiTables and GridKNN: PyOD contract, merged-model equivalence, private noise, AUC floors."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

import common.detectors.lsh_itables as lsh_module
import common.histograms.release as release_module
from common.detectors import BaseDetector, GridKNN, LSHiTables, NotFittedError
from common.detectors.grid_scores import knn_grid_scores
from common.detectors.lsh_itables import _subsample_histogram, cell_scores
from common.histograms.grid import GridSpec
from common.histograms.hashing import derive_lsh_family
from common.noise.laplace import add_discrete_laplace

DATASETS = Path(__file__).parents[3] / "shared" / "datasets"
needs_data = pytest.mark.skipif(not DATASETS.is_dir(), reason=f"{DATASETS} not present")

DETECTORS: dict[str, Callable[..., BaseDetector]] = {
    "lsh": lambda **kw: LSHiTables(n_tables=20, sample_size=64, random_state=0, **kw),
    "grid": lambda **kw: GridKNN(bins=4, k=5, max_depth=2, **kw),
}


def blobs(n: int = 300, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    inliers = rng.normal(0.5, 0.08, size=(n, 3))
    outliers = rng.uniform(0.0, 1.0, size=(n // 10, 3))
    return np.clip(np.vstack([inliers, outliers]), 0.0, 1.0)


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    data = np.load(DATASETS / f"{name}.npz")
    return data["X"], data["y"]


@pytest.mark.parametrize("kind", DETECTORS)
def test_pyod_contract(kind: str) -> None:
    det: BaseDetector = DETECTORS[kind](contamination=0.1)
    assert not [k for k in vars(det) if k.endswith("_")], "__init__ must not fit anything"
    with pytest.raises(NotFittedError):
        det.decision_function(blobs())
    X = blobs()
    assert det.fit(X) is det
    scores = det.decision_function(X)
    assert scores.shape == (len(X),) and scores.dtype == np.float64
    np.testing.assert_allclose(det.decision_scores_, scores)
    labels = det.predict(X)
    assert set(np.unique(labels)) <= {0, 1}
    np.testing.assert_array_equal(labels, det.labels_)
    assert labels.mean() <= 0.1 + 1e-9
    assert det.get_params()["contamination"] == 0.1
    # the planted outliers (last rows) score higher than the blob on average
    assert scores[-30:].mean() > scores[:300].mean()


@pytest.mark.parametrize("kind", DETECTORS)
@pytest.mark.parametrize("contamination", [0.0, 0.7])
def test_contamination_is_checked(kind: str, contamination: float) -> None:
    with pytest.raises(ValueError, match="contamination"):
        DETECTORS[kind](contamination=contamination).fit(blobs())


@pytest.mark.parametrize("kind", DETECTORS)
def test_private_mode_needs_public_bounds(kind: str) -> None:
    with pytest.raises(ValueError, match="public bounds"):
        DETECTORS[kind](epsilon=1).fit(blobs())


def test_lsh_fit_is_reproducible() -> None:
    X = blobs()
    a = LSHiTables(random_state=3).fit(X).decision_scores_
    b = LSHiTables(random_state=3).fit(X).decision_scores_
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("d", [3, 20])
def test_lsh_subsampling_counts_sample_size_records_per_table(d: int) -> None:
    X = np.random.default_rng(d).normal(size=(2000, d))
    det = LSHiTables(n_tables=40, sample_size=100, random_state=2).fit(X)
    fam = det.family_
    np.testing.assert_array_equal(np.add.reduceat(det.histograms_, fam.offsets[:-1]),
                                  np.full(40, 100))
    rows = np.random.default_rng(0).integers(0, len(X), size=(40, 100))
    expected = np.zeros(fam.n_cells, dtype=np.int64)
    for j in range(40):
        np.add.at(expected, fam.flat_index(X[rows[j]])[:, j], 1)
    np.testing.assert_array_equal(_subsample_histogram(fam, X, rows), expected)


@pytest.mark.parametrize("scoring", ["log", "mass"])
def test_lsh_from_histogram_equals_fit_without_noise(scoring: Any) -> None:
    X = blobs()
    fitted = LSHiTables(n_tables=30, subsample=False, scoring=scoring, random_state=1).fit(X)
    merged = LSHiTables.from_histogram(
        fitted.family_, fitted.family_.histogram(X), scoring=scoring, X=X
    )
    np.testing.assert_array_equal(merged.histograms_, fitted.histograms_)
    np.testing.assert_allclose(merged.decision_function(X), fitted.decision_function(X))
    assert merged.threshold_ == pytest.approx(fitted.threshold_)


def test_lsh_merge_of_parts_equals_whole() -> None:
    X = blobs()
    fam = derive_lsh_family(b"study", np.zeros(3), np.ones(3), 25, 64)
    merged = fam.histogram(X[:100]) + fam.histogram(X[100:])
    whole = LSHiTables.from_histogram(fam, fam.histogram(X))
    parts = LSHiTables.from_histogram(fam, merged)
    np.testing.assert_allclose(parts.decision_function(X), whole.decision_function(X))


def test_lsh_paper_score() -> None:
    """Paper: score = mean_j log2(max(C_j[g_j(q)], 1)); decision_function is its negation."""
    X = blobs()
    fam = derive_lsh_family(b"s", np.zeros(3), np.ones(3), 10, 32)
    counts = fam.histogram(X)
    det = LSHiTables.from_histogram(fam, counts, scoring="log")
    idx = fam.flat_index(X)
    expected = np.mean(np.log2(np.maximum(counts[idx], 1)), axis=1)
    np.testing.assert_allclose(det.decision_function(X), -expected)


def test_lsh_log_score_of_noisy_counts_uses_the_corrected_counts() -> None:
    """Noisy tables disagree on the total: each is shifted to the common total and clamped
    (as for the mass score) before the paper's log."""
    fam = derive_lsh_family(b"s", np.zeros(3), np.ones(3), 10, 32)
    counts = fam.histogram(blobs())
    noisy = counts.copy()
    noisy[fam.offsets[0]] -= 40  # table 0 now sums to 40 less than the others
    log, mass = cell_scores(fam, noisy, "log"), cell_scores(fam, noisy, "mass")
    full = log > 0
    ratio = 2.0**log[full] / mass[full]  # corrected count / mass = the common total
    np.testing.assert_allclose(ratio, ratio[0])
    assert counts.sum() / 10 - 40 < ratio[0] < counts.sum() / 10
    np.testing.assert_allclose(log, np.log2(np.maximum(mass * ratio[0], 1.0)))


def test_mass_scoring_is_a_distribution_per_table() -> None:
    fam = derive_lsh_family(b"s", np.zeros(3), np.ones(3), 10, 32)
    mass = cell_scores(fam, fam.histogram(blobs()), "mass")
    np.testing.assert_allclose(np.add.reduceat(mass, fam.offsets[:-1]), np.ones(10))
    assert np.all(mass >= 0)


@pytest.mark.parametrize(
    ("counts", "match"), [(np.zeros(5, dtype=np.int64), "shape"), (None, "integers")]
)
def test_from_histogram_validates(counts: Any, match: str) -> None:
    fam = derive_lsh_family(b"s", np.zeros(3), np.ones(3), 10, 32)
    bad = np.zeros(fam.n_cells) if counts is None else counts
    with pytest.raises(ValueError, match=match):
        LSHiTables.from_histogram(fam, bad)


def test_lsh_private_noise_from_opendp(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every cell gets discrete Laplace noise of scale n_tables / epsilon (OpenDP)."""
    calls: list[tuple[int, object]] = []

    def spy(counts: np.ndarray, sensitivity: int, epsilon: Decimal | int | str) -> np.ndarray:
        calls.append((sensitivity, epsilon))
        return add_discrete_laplace(counts, sensitivity, epsilon)

    monkeypatch.setattr(lsh_module, "add_discrete_laplace", spy)
    X = blobs()
    det = LSHiTables(n_tables=50, epsilon=5, lo=np.zeros(3), hi=np.ones(3),
                     private_sample_size=256, random_state=0).fit(X)
    assert calls == [(50, 5)]
    noise = det.histograms_ - det.family_.histogram(X)
    assert np.count_nonzero(noise) > 0.9 * noise.size
    b = 50 / 5  # scale; discrete Laplace variance 2 e^{-1/b} / (1 - e^{-1/b})^2 ~ 2 b^2
    var = 2 * np.exp(-1 / b) / (1 - np.exp(-1 / b)) ** 2
    assert noise.size > 1000
    assert 0.7 * var < noise.var() < 1.4 * var
    assert abs(noise.mean()) < 4 * np.sqrt(var / noise.size)


def test_grid_private_noise_from_opendp(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, object]] = []

    def spy(counts: np.ndarray, sensitivity: int, epsilon: Decimal | int | str) -> np.ndarray:
        calls.append((sensitivity, epsilon))
        assert counts.shape == (4**3,)  # dense: empty cells are noised too
        return add_discrete_laplace(counts, sensitivity, epsilon)

    monkeypatch.setattr(release_module, "add_discrete_laplace", spy)
    X = blobs()
    exact = GridKNN(bins=4, k=10, lo=np.zeros(3), hi=np.ones(3)).fit(X)
    noisy = GridKNN(bins=4, k=10, lo=np.zeros(3), hi=np.ones(3), epsilon="0.5").fit(X)
    assert calls == [(1, Decimal("0.5"))]
    assert not np.array_equal(noisy.cells_, exact.cells_) or not np.array_equal(
        noisy.cell_counts_, exact.cell_counts_)
    assert np.all(noisy.cell_counts_ > 0)


def test_grid_private_refuses_oversized_dense_grid() -> None:
    with pytest.raises(ValueError, match="cell_limit"):
        GridKNN(bins=4, k=10, projection=None, lo=np.zeros(3), hi=np.ones(3), epsilon=1,
                cell_limit=10).fit(blobs())


def brute_force(spec: GridSpec, counts: np.ndarray, point: np.ndarray, k: int, depth: int,
                weighted: bool) -> float:
    """Algorithm 1 by enumerating every cell (small grids only)."""
    here = spec.cell_coords(point[None, :])[0]
    by_depth = np.zeros(depth + 1)
    for cell in itertools.product(range(spec.bins), repeat=spec.n_dims):
        t = int(np.abs(np.array(cell) - here).sum())
        if t <= depth:
            by_depth[t] += max(counts[int(np.array(cell) @ spec.strides)], 0)
    covered, total = 0.0, 0.0
    for t in range(depth + 1):
        take = min(by_depth[t], k - covered)
        covered += take
        total += t * take
        if covered >= k:
            return total / k if weighted else float(t)
    return (total + (k - covered) * (depth + 1)) / k if weighted else float(depth + 1)


@pytest.mark.parametrize(("k", "depth", "weighted"),
                         [(1, 0, False), (5, 2, True), (5, 2, False), (40, 1, True),
                          (10**6, 3, True), (10**6, 3, False)])
def test_grid_scores_match_enumeration(k: int, depth: int, weighted: bool) -> None:
    rng = np.random.default_rng(k + depth)
    spec = GridSpec(np.zeros(3), np.ones(3), bins=4)
    X = rng.random((200, 3)) ** 2
    counts = spec.dense_counts(X) + rng.integers(-2, 3, size=spec.n_cells)  # noisy
    det = GridKNN.from_counts(spec, counts, k=k, max_depth=depth, weighted=weighted)
    queries = rng.random((30, 3))
    expected = [brute_force(spec, counts, q, k, depth, weighted) for q in queries]
    np.testing.assert_allclose(det.decision_function(queries), expected)
    assert det.decision_function(queries).max() <= depth + 1


@pytest.mark.parametrize("form", ["dense", "mapping", "pairs"])
def test_grid_from_counts_equals_fit_without_noise(form: str) -> None:
    X = blobs()
    fitted = GridKNN(lo=np.zeros(3), hi=np.ones(3), features=(0, 2), k=7).fit(X)
    spec = fitted.spec_
    counts: Any = {
        "dense": spec.dense_counts(X),
        "mapping": spec.counts(X),
        "pairs": (list(spec.counts(X)), list(spec.counts(X).values())),
    }[form]
    merged = GridKNN.from_counts(spec, counts, k=7, X=X)
    np.testing.assert_allclose(merged.decision_function(X), fitted.decision_function(X))
    assert merged.threshold_ == pytest.approx(fitted.threshold_)


def test_grid_empty_release_scores_maximal() -> None:
    spec = GridSpec(np.zeros(2), np.ones(2), bins=3)
    det = GridKNN.from_counts(spec, np.full(9, -4), k=3, max_depth=2)
    np.testing.assert_array_equal(det.decision_function(np.full((4, 2), 0.5)), np.full(4, 3.0))


def test_grid_scan_handles_many_queries_and_cells() -> None:
    rng = np.random.default_rng(0)
    cells = rng.integers(0, 6, size=(5000, 8))
    query = rng.integers(0, 6, size=(3000, 8))
    scores = knn_grid_scores(query, cells, np.ones(5000, dtype=np.int64), k=3, max_depth=4,
                             weighted=True)
    assert scores.shape == (3000,) and np.all((scores >= 0) & (scores <= 5))


@needs_data
@pytest.mark.parametrize(
    ("name", "make", "floor"),
    [
        ("breastw", lambda X: LSHiTables(random_state=0), 0.96),
        ("cardio_dedup", lambda X: LSHiTables(random_state=0), 0.90),
        ("breastw", lambda X: LSHiTables(epsilon=1, lo=X.min(0), hi=X.max(0),
                                         random_state=0), 0.95),
        ("cardio_dedup", lambda X: LSHiTables(epsilon=1, lo=X.min(0), hi=X.max(0),
                                              random_state=0), 0.86),
        ("breastw", lambda X: GridKNN(bins=4, k=10, max_depth=3), 0.95),
    ],
    ids=["lsh-breastw", "lsh-cardio", "lsh-private-breastw", "lsh-private-cardio",
         "grid-breastw"],
)
def test_auc_floor(name: str, make: Any, floor: float) -> None:
    X, y = load(name)
    det = make(X).fit(X)
    assert roc_auc_score(y, det.decision_scores_) >= floor


@pytest.mark.parametrize("make", [lambda: LSHiTables(random_state=0), lambda: GridKNN(bins=3)])
def test_training_scores_are_computed_on_first_access(make) -> None:
    X = np.random.default_rng(0).normal(size=(300, 3))
    det = make().fit(X)
    assert det._calibrated is None  # fit builds the model only
    np.testing.assert_array_equal(det.labels_, det.decision_function(X) > det.threshold_)
    np.testing.assert_allclose(det.decision_scores_, det.decision_function(X))
    with pytest.raises(NotFittedError):
        make().predict(X)


@pytest.mark.parametrize("d", [3, 20])
def test_subsample_histogram_counts_each_tables_own_rows_in_any_layout(d: int) -> None:
    """Table j counts exactly the rows rows[j] (checked against the family's hash), whatever
    the memory layout of X (one flat gather for C order, fancy indexing otherwise)."""
    rng = np.random.default_rng(d)
    X = rng.normal(size=(500, d))
    family = derive_lsh_family(b"sub", X.min(axis=0), X.max(axis=0), 12, 64)
    rows = np.stack([rng.choice(500, 40, replace=False) for _ in range(12)])
    expected = np.zeros(family.n_cells, dtype=np.int64)
    for j in range(family.n_tables):
        np.add.at(expected, family.flat_index(X[rows[j]])[:, j], 1)
    wide = np.repeat(X, 2, axis=1)[:, ::2]  # a strided view of the same values
    for layout in (X, np.asfortranarray(X), wide):
        np.testing.assert_array_equal(_subsample_histogram(family, layout, rows), expected)
