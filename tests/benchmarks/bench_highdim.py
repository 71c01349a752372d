"""GridKNN on high-dimensional data (issue 8 item 2) next to exact k-NN and LSH iTables.

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_highdim.py            # all four datasets
    .venv/bin/python tests/benchmarks/bench_highdim.py --datasets digits musk

Prints a markdown table of ROC AUCs (%). Data: ``mnist``, ``musk``, ``satimage-2`` from
``../shared/datasets`` and scikit-learn's bundled ``digits`` (digit 0 is the outlier class,
subsampled to 5 % of the rows with a fixed seed). Every detector is fitted and scored on all
rows; the feature bounds are the data's min/max, standing in for the study's public bounds.

- exact k-NN: distance to the 5th nearest other row (scikit-learn ``NearestNeighbors``),
  on min-max scaled data.
- LSHiTables: defaults (m = 100); private: epsilon = 1, public bounds.
- GridKNN, all features: its defaults (4 bins on every feature, k = 10, max_depth = 3); the
  private release is the sparse thresholded one (epsilon = 1, delta = 1e-6,
  ``common.histograms.release.release_grid``), as a study with that many cells would release it.
- GridKNN, projection: 8 bins over 6 random +-1 projections derived from a public seed
  (``projection=6``), 262,144 cells: released densely at epsilon = 1 (pure DP).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.metrics import roc_auc_score
from sklearn.neighbors import NearestNeighbors

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from common.detectors import GridKNN, LSHiTables  # noqa: E402

DATA = Path(__file__).resolve().parents[3] / "shared" / "datasets"
DATASETS = ["mnist", "musk", "satimage-2", "digits"]
EPSILON, DELTA = "1", "1e-6"
SEED = bytes(range(32))


def load(data: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    if name == "digits":
        X, digit = load_digits(return_X_y=True)
        rng = np.random.default_rng(0)
        outliers = np.flatnonzero(digit == 0)
        inliers = np.flatnonzero(digit != 0)
        keep = rng.choice(outliers, size=int(0.05 * inliers.size / 0.95), replace=False)
        rows = np.sort(np.r_[inliers, keep])
        return X[rows].astype(np.float64), (digit[rows] == 0).astype(int)
    arrays = np.load(data / f"{name}.npz")
    return arrays["X"].astype(np.float64), arrays["y"].astype(int)


def exact_knn(X: np.ndarray) -> np.ndarray:
    span = np.where(X.max(axis=0) > X.min(axis=0), X.max(axis=0) - X.min(axis=0), 1.0)
    Z = (X - X.min(axis=0)) / span
    dist, _ = NearestNeighbors(n_neighbors=6).fit(Z).kneighbors(Z)
    return np.asarray(dist[:, 5])


def grid(X: np.ndarray, weighted: bool, private: bool, projection: int | None) -> np.ndarray:
    lo, hi = X.min(axis=0), np.where(X.max(axis=0) > X.min(axis=0), X.max(axis=0),
                                     X.min(axis=0) + 1)
    bins = 4 if projection is None else 8
    det = GridKNN(bins=bins, k=10, weighted=weighted, lo=lo, hi=hi, projection=projection,
                  seed=SEED, epsilon=EPSILON if private else None, delta=DELTA)
    return det.fit(X).decision_function(X)


def methods(X: np.ndarray) -> list[tuple[str, Callable[[], np.ndarray]]]:
    lo, hi = X.min(axis=0), X.max(axis=0)
    out: list[tuple[str, Callable[[], np.ndarray]]] = [
        ("exact 5-NN", lambda: exact_knn(X)),
        ("LSHiTables", lambda: LSHiTables(random_state=0).fit(X).decision_function(X)),
        ("LSHiTables eps=1", lambda: LSHiTables(lo=lo, hi=hi, epsilon=EPSILON, random_state=0)
         .fit(X).decision_function(X)),
    ]
    for projection in (None, 6):
        for weighted in (False, True):
            for private in (False, True):
                name = (f"GridKNN {'proj 6x8' if projection else 'all 4'} "
                        f"{'weighted' if weighted else 'basic'}{' eps=1' if private else ''}")
                out.append((name, lambda w=weighted, p=private, q=projection: grid(X, w, p, q)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--datasets", nargs="+", default=DATASETS, choices=DATASETS)
    args = parser.parse_args()
    rows: dict[str, dict[str, str]] = {}
    shapes = []
    for name in args.datasets:
        X, y = load(args.data, name)
        shapes.append(f"{name} {X.shape[0]}x{X.shape[1]} ({int(y.sum())} outliers)")
        for label, run in methods(X):
            start = time.perf_counter()
            scores = run()
            took = time.perf_counter() - start
            rows.setdefault(label, {})[name] = f"{100 * roc_auc_score(y, scores):.1f} ({took:.1f}s)"
            print(f"{name} {label}: {rows[label][name]}", file=sys.stderr)
    print("ROC AUC % (fit + score time), " + "; ".join(shapes) + "\n")
    print("| method | " + " | ".join(args.datasets) + " |")
    print("|---|" + "---|" * len(args.datasets))
    for label, cells in rows.items():
        print(f"| {label} | " + " | ".join(cells[n] for n in args.datasets) + " |")


if __name__ == "__main__":
    main()
