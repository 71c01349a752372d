"""Outlier detection with the centroid detector and the combined score (issue 9, items 3-4).

Run from the repository root::

    nice -n 10 .venv/bin/python tests/benchmarks/bench_centroid.py             # 5 seeds
    nice -n 10 .venv/bin/python tests/benchmarks/bench_centroid.py --seeds 2 --datasets pima

Prints markdown (BENCHMARKS.md, section "Centroid detector and combined score"). In-process,
no network: the coordinator's view (the sum of the participants' noisy releases) is modelled
exactly. Every dataset is split evenly over ``p = 10`` participants; each releases, with its
own independent OpenDP noise at epsilon = 1 per release:

- LSH iTables: m = 100 tables of size s = 16 (the study defaults), scale m / epsilon;
- the grid: the study defaults (4 bins over all features, k = 10, depth 3), dense up to
  10^6 cells, else sparse and thresholded with delta = 1e-6;
- the cohorts: DP k-means with fusion (``common.detectors.centroid.private_cohorts``, the
  detector's default k, over and rounds), epsilon = 1 over all rounds.

Public bounds stand in for a published schema: each dataset's min/max rounded outward to
a tenth of the range's power of ten. Each participant scores its own records with the merged
models and combines the scores locally (rank percentiles within its own file), so AUC is the
mean over participants (with both classes) and seeds. "mean of ranks" is the combination
used before issue 9 (equal weights over LSH and grid); "mean of 3 ranks" adds the centroid
detector with equal weights; "combined" is
:func:`common.detectors.combine.combine` with the weights of
:func:`common.detectors.combine.public_weights` over the three detectors.
"""

from __future__ import annotations

import argparse
import sys
import time
from decimal import Decimal
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from common.detectors import CentroidDetector, GridKNN, LSHiTables  # noqa: E402
from common.detectors.centroid import private_cohorts  # noqa: E402
from common.detectors.combine import DetectorPlan, combine, public_weights  # noqa: E402
from common.histograms.grid import GridSpec  # noqa: E402
from common.histograms.hashing import derive_lsh_family  # noqa: E402
from common.histograms.merge import merge_sparse  # noqa: E402
from common.histograms.release import release_grid, release_lsh  # noqa: E402

DATA = Path(__file__).resolve().parents[3] / "shared" / "datasets"
DATASETS = ["breastw", "pima", "cardio", "thyroid", "pendigits", "satimage-2", "shuttle"]
P, EPS, M, S, DELTA, CELL_LIMIT = 10, Decimal(1), 100, 16, Decimal("1e-6"), 1_000_000
COLUMNS = ["centroid", "lsh", "grid", "mean of ranks", "mean of 3 ranks", "combined"]


def public_bounds(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """min/max rounded outward to a tenth of the range's power of ten (the stand-in schema)."""
    lo, hi = X.min(axis=0), X.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    step = 10.0 ** np.floor(np.log10(span)) / 10.0
    lo_r, hi_r = np.floor(lo / step) * step, np.ceil(hi / step) * step
    return lo_r, np.where(hi_r > lo_r, hi_r, lo_r + step)


def merged_grid(spec: GridSpec, parts: list[np.ndarray]) -> tuple[object, bool]:
    """Sum of the participants' grid releases (dense vector or sparse pair)."""
    sparse = spec.n_cells > CELL_LIMIT
    delta = DELTA if sparse else 0
    rel = [release_grid(spec, x, EPS, delta, CELL_LIMIT) for x in parts]
    if not sparse:
        return np.sum([r.values for r in rel], axis=0), False
    keys, values = rel[0].indices, rel[0].values
    for r in rel[1:]:
        keys, values = merge_sparse(keys, values, r.indices, r.values)
    return (keys, values), True


def one_seed(X: np.ndarray, y: np.ndarray, seed: int) -> tuple[dict[str, float], dict]:
    rng = np.random.default_rng(seed)  # the data split only, never noise
    parts_idx = np.array_split(rng.permutation(len(X)), P)
    parts = [X[i] for i in parts_idx]
    lo, hi = public_bounds(X)
    seed_bytes = seed.to_bytes(8, "little")
    family = derive_lsh_family(seed_bytes, lo, hi, M, S)
    lsh_counts = np.sum([release_lsh(family, x, EPS).values for x in parts], axis=0)
    spec = GridSpec(lo, hi, bins=4)
    grid_counts, sparse = merged_grid(spec, parts)
    centroid = CentroidDetector()
    model = private_cohorts(parts, lo, hi, centroid.n_clusters, EPS, seed_bytes,
                            over=centroid.over, rounds=centroid.rounds)
    detectors = {
        "lsh": LSHiTables.from_histogram(family, lsh_counts, scoring="mass"),
        "grid": GridKNN.from_counts(spec, grid_counts, k=10, max_depth=3),
        "centroid": CentroidDetector.from_model(model),
    }
    expected = len(X) // P  # the administrator's declared records per participant
    plans = {
        "lsh": DetectorPlan.lsh(EPS, P, expected, M, S),
        "grid": DetectorPlan.grid(EPS, P, expected, spec.n_cells, sparse=sparse),
        "centroid": DetectorPlan.centroid(EPS, P, expected, model.k, X.shape[1]),
    }
    weights = public_weights(plans)
    aucs: dict[str, list[float]] = {c: [] for c in COLUMNS}
    for idx in parts_idx:
        yy = y[idx]
        if yy.min() == yy.max():
            continue
        scores = {name: det.decision_function(X[idx]) for name, det in detectors.items()}
        for name, s in scores.items():
            aucs[name].append(roc_auc_score(yy, s))
        old, _ = combine({k: scores[k] for k in ("lsh", "grid")})
        new, _ = combine(scores, weights)
        aucs["mean of ranks"].append(roc_auc_score(yy, old))
        aucs["mean of 3 ranks"].append(roc_auc_score(yy, combine(scores)[0]))
        aucs["combined"].append(roc_auc_score(yy, new))
    return {c: float(np.mean(v)) for c, v in aucs.items()}, weights


def rules(args: argparse.Namespace) -> None:
    """The ``--rules`` ablation (LSH and centroid detectors only)."""
    cols = ["centroid", "lsh", "equal", "reliability", "precision"]
    print(f"### Weighting rules: LSH + centroid, p = {P}, epsilon = {EPS}, {args.seeds} seeds\n")
    print("| dataset | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols))
    means = []
    for name in args.datasets:
        arrays = np.load(args.data / f"{name}.npz")
        X, y = arrays["X"], arrays["y"].astype(int)
        lo, hi = public_bounds(X)
        aucs: dict[str, list[float]] = {c: [] for c in cols}
        for seed in range(args.seeds):
            idx_parts = np.array_split(np.random.default_rng(seed).permutation(len(X)), P)
            parts, seed_bytes = [X[i] for i in idx_parts], seed.to_bytes(8, "little")
            family = derive_lsh_family(seed_bytes, lo, hi, M, S)
            counts = np.sum([release_lsh(family, x, EPS).values for x in parts], axis=0)
            model = private_cohorts(parts, lo, hi, 4, EPS, seed_bytes, over=3, rounds=3)
            dets = {"lsh": LSHiTables.from_histogram(family, counts, scoring="mass"),
                    "centroid": CentroidDetector.from_model(model)}
            plans = {"lsh": DetectorPlan.lsh(EPS, P, len(X) // P, M, S),
                     "centroid": DetectorPlan.centroid(EPS, P, len(X) // P, model.k,
                                                       X.shape[1])}
            for idx in idx_parts:
                if y[idx].min() == y[idx].max():
                    continue
                sc = {k: d.decision_function(X[idx]) for k, d in dets.items()}
                for k in ("centroid", "lsh"):
                    aucs[k].append(roc_auc_score(y[idx], sc[k]))
                aucs["equal"].append(roc_auc_score(y[idx], combine(sc)[0]))
                for rule in ("reliability", "precision"):
                    w = public_weights(plans, rule)  # type: ignore[arg-type]
                    aucs[rule].append(roc_auc_score(y[idx], combine(sc, w)[0]))
        row = [100 * float(np.mean(aucs[c])) for c in cols]
        means.append(row)
        print(f"| {name} | " + " | ".join(f"{v:.1f}" for v in row) + " |", flush=True)
    print("| **mean** | " + " | ".join(f"**{v:.2f}**" for v in np.mean(means, axis=0)) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--datasets", nargs="+", default=DATASETS)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--rules", action="store_true",
                    help="ablation: LSH + centroid only (no grid, whose weight is at most 0.02"
                         " here), combined with each rule of public_weights and equal weights")
    args = ap.parse_args()
    if args.rules:
        rules(args)
        return
    start = time.perf_counter()
    print(f"### p = {P}, epsilon = {EPS} per participant and release, {args.seeds} seeds"
          " (AUC x 100, mean over participants and seeds)\n")
    print("| dataset | n | d | " + " | ".join(COLUMNS) + " | weights lsh / grid / centroid |")
    print("|---|---|---|" + "---|" * (len(COLUMNS) + 1))
    means: dict[str, list[float]] = {c: [] for c in COLUMNS}
    for name in args.datasets:
        arrays = np.load(args.data / f"{name}.npz")
        X, y = arrays["X"], arrays["y"].astype(int)
        runs = [one_seed(X, y, seed) for seed in range(args.seeds)]
        row = {c: 100 * float(np.mean([r[0][c] for r in runs])) for c in COLUMNS}
        for c in COLUMNS:
            means[c].append(row[c])
        w = runs[0][1]
        best = max(row[c] for c in ("centroid", "lsh", "grid"))
        cells = " | ".join(f"**{row[c]:.1f}**" if row[c] >= best - 1e-9 else f"{row[c]:.1f}"
                           for c in COLUMNS)
        print(f"| {name} | {len(X)} | {X.shape[1]} | {cells} | "
              f"{w['lsh']:.2f} / {w['grid']:.2f} / {w['centroid']:.2f} |", flush=True)
    avg = {c: float(np.mean(v)) for c, v in means.items()}
    print("| **mean** | | | " + " | ".join(f"**{avg[c]:.1f}**" for c in COLUMNS) + " | |")
    best_single = max(("centroid", "lsh", "grid"), key=lambda c: avg[c])
    verdict = "at least as good as" if avg["combined"] >= avg[best_single] else "worse than"
    print(f"\nCombined {avg['combined']:.2f} vs best single detector on average "
          f"({best_single}) {avg[best_single]:.2f}: {verdict}. "
          f"Mean of ranks: {avg['mean of ranks']:.2f}. "
          f"{time.perf_counter() - start:.0f} s.")


if __name__ == "__main__":
    main()
