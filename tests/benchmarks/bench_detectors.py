"""Detector benchmark: accuracy vs the LSH iTables paper, federated private AUC, speed.

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_detectors.py            # full run (BENCHMARKS.md)
    .venv/bin/python tests/benchmarks/bench_detectors.py --quick    # fewer seeds
    .venv/bin/python tests/benchmarks/bench_detectors.py --datasets breastw cardio_dedup

Prints markdown. Datasets are read from ``../shared/datasets`` (``--data`` to change).
All privacy noise comes from OpenDP (``common.noise.laplace.add_discrete_laplace``).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path

import numpy as np
import sklearn
from sklearn.ensemble import IsolationForest
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from common.detectors import GridKNN, LSHiTables  # noqa: E402
from common.detectors.lsh_itables import PRIVATE_SAMPLE_SIZE, Scoring  # noqa: E402
from common.hashing import derive_lsh_family  # noqa: E402
from common.noise.laplace import add_discrete_laplace  # noqa: E402

DATA = Path(__file__).resolve().parents[3] / "shared" / "datasets"
# (file, label in the paper, paper Table 2 AUC %)
PAPER = [
    ("breastw", "BreastW", 97.3),
    ("pima", "Pima", 69.1),
    ("cardio_dedup", "Cardio", 93.4),
    ("mnist", "Mnist", 82.4),
    ("musk", "Musk", 100.0),
    ("pendigits", "Pendigits", 95.1),
    ("satimage-2_dedup", "Satimage-2", 99.2),
    ("thyroid_dedup", "Thyroid", 94.8),
    ("shuttle", "Shuttle", 99.0),
    ("cover", "Cover", 98.9),
]
COMPARED = {"breastw", "pima", "cardio_dedup", "mnist", "musk", "pendigits",
            "satimage-2_dedup", "thyroid_dedup", "shuttle"}
GRID_MAX_D = 10  # a 4-bin grid on more dimensions is (almost) all singleton cells
FEDERATED = ["breastw", "cardio_dedup"]
PARTICIPANTS = [2, 4, 6, 8, 10]


def load(data: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    arrays = np.load(data / f"{name}.npz")
    return arrays["X"], arrays["y"].astype(int)


def timed(fn: Callable[[], np.ndarray]) -> tuple[np.ndarray, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def machine() -> str:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"nproc {os.cpu_count()}, CPU {model}, Python {platform.python_version()}, "
            f"numpy {np.__version__}, scikit-learn {sklearn.__version__}")


def centralised(data: Path, names: Sequence[str], seeds: int) -> None:
    print(f"## 1. Centralised, non-private ({seeds} seeds, m = 100, s = 1000)\n")
    print("LSHiTables: standalone `fit` with the paper's subsampling (s records per table),"
          " bounds from the data. IsolationForest: scikit-learn, n_estimators=100, n_jobs=1."
          " GridKNN: bins=4, k=10, max_depth=3, weighted, exact counts, datasets with"
          f" d <= {GRID_MAX_D}. Times are fit + score of all rows, mean per seed.\n")
    print("| dataset | n | d | paper | LSHiTables AUC | diff | LSH s | IForest AUC | IForest s"
          " | GridKNN AUC |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    diffs: list[float] = []
    for name, label, paper in PAPER:
        if name not in names:
            continue
        X, y = load(data, name)
        lsh_auc: list[float] = []
        lsh_t: list[float] = []
        if_auc: list[float] = []
        if_t: list[float] = []
        for seed in range(seeds):
            det = LSHiTables(random_state=seed)
            forest = IsolationForest(n_estimators=100, random_state=seed, n_jobs=1)

            def run_lsh(det: LSHiTables = det, X: np.ndarray = X) -> np.ndarray:
                return det.fit(X).decision_function(X)

            def run_forest(f: IsolationForest = forest, X: np.ndarray = X) -> np.ndarray:
                return np.asarray(-f.fit(X).score_samples(X))

            for run, aucs, times in ((run_lsh, lsh_auc, lsh_t), (run_forest, if_auc, if_t)):
                scores, t = timed(run)
                aucs.append(roc_auc_score(y, scores))
                times.append(t)
        grid = "n/a"
        if X.shape[1] <= GRID_MAX_D:
            gk = GridKNN(bins=4, k=10, max_depth=3, weighted=True).fit(X)
            grid = f"{100 * roc_auc_score(y, gk.decision_scores_):.1f}"
        auc = 100 * float(np.mean(lsh_auc))
        diff = auc - paper
        shown = f"{diff:+.1f}" if name in COMPARED else f"({diff:+.1f})"
        if name in COMPARED:
            diffs.append(diff)
        print(f"| {label} ({name}) | {len(X)} | {X.shape[1]} | {paper:.1f} | {auc:.1f} "
              f"± {100 * np.std(lsh_auc):.1f} | {shown} | {np.mean(lsh_t):.2f} | "
              f"{100 * np.mean(if_auc):.1f} | {np.mean(if_t):.2f} | {grid} |", flush=True)
    if diffs:
        print(f"\nCompared datasets: mean diff {np.mean(diffs):+.2f} points, worst "
              f"{min(diffs):+.1f} (target: mean >= -1.5, none below -3). Cover is shown, not"
              " compared (the paper used the 54-attribute version).\n")


def federated_auc(
    X: np.ndarray, y: np.ndarray, p: int, epsilon: str, seed: int, sample_size: int,
    scorings: Sequence[Scoring], n_tables: int = 100,
) -> dict[str, float]:
    """Split evenly over ``p`` participants, each releases all ``m`` tables with noise of scale
    ``m / epsilon`` (OpenDP), sum, and each scores its own records with the merged model."""
    rng = np.random.default_rng(seed)
    parts = np.array_split(rng.permutation(len(X)), p)
    family = derive_lsh_family(seed.to_bytes(8, "little"), X.min(axis=0), X.max(axis=0),
                               n_tables, sample_size)
    merged = np.zeros(family.n_cells, dtype=np.int64)
    for part in parts:
        merged += add_discrete_laplace(family.histogram(X[part]), family.n_tables,
                                       Decimal(epsilon))
    out: dict[str, float] = {}
    for scoring in scorings:
        model = LSHiTables.from_histogram(family, merged, scoring=scoring)
        aucs = [roc_auc_score(y[part], model.decision_function(X[part])) for part in parts
                if 0 < y[part].sum() < len(part)]
        out[scoring] = 100 * float(np.mean(aucs))
    return out


def federated(data: Path, names: Sequence[str], seeds: int, epsilons: Sequence[str]) -> None:
    names = [n for n in FEDERATED if n in names]
    if not names:
        return
    print(f"## 2. Federated, private ({seeds} seeds, m = 100)\n")
    print("Data split evenly over p participants; each releases its 100 LSH tables (every"
          " record counted, sensitivity 100) with OpenDP discrete Laplace noise of scale"
          " 100 / epsilon on every cell; the coordinator sums; each participant scores its own"
          " records with the merged model (`LSHiTables.from_histogram`, scoring='mass')."
          " AUC = mean over participants and seeds. Family derived with"
          f" private_sample_size = {PRIVATE_SAMPLE_SIZE}. The public schema bounds are the"
          " min/max of the full dataset (standing in for the ranges a study would declare).\n")
    for eps in epsilons:
        print(f"### epsilon = {eps} per participant\n")
        print("| dataset | " + " | ".join(f"p={p}" for p in PARTICIPANTS) + " |")
        print("|---|" + "---|" * len(PARTICIPANTS))
        for name in names:
            X, y = load(data, name)
            row = []
            for p in PARTICIPANTS:
                res = [federated_auc(X, y, p, eps, seed, PRIVATE_SAMPLE_SIZE, ["mass"])
                       for seed in range(seeds)]
                row.append(f"{np.mean([r['mass'] for r in res]):.1f}")
            print(f"| {name} | " + " | ".join(row) + " |", flush=True)
        print()


def ablation(data: Path, names: Sequence[str], seeds: int) -> None:
    names = [n for n in FEDERATED if n in names]
    if not names:
        return
    sizes = sorted({4, PRIVATE_SAMPLE_SIZE, 64, 1000})
    print(f"### Ablation: table size and scoring under noise (p = 10, epsilon = 1, {seeds}"
          " seeds)\n")
    print("| dataset | " + " | ".join(f"s={s} log | s={s} mass" for s in sizes) + " |")
    print("|---|" + "---|---|" * len(sizes))
    for name in names:
        X, y = load(data, name)
        cells = []
        for s in sizes:
            res = [federated_auc(X, y, 10, "1", 1000 + seed, s, ["log", "mass"])
                   for seed in range(seeds)]
            cells += [f"{np.mean([r[k] for r in res]):.1f}" for k in ("log", "mass")]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    print()


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    """Fastest of ``repeats`` wall-clock runs (the machine is shared)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def few_tables(data: Path, names: Sequence[str], seeds: int) -> None:
    names = [n for n in FEDERATED if n in names]
    if not names:
        return
    counts = [10, 25, 100]
    print(f"### Ablation: fewer tables at epsilon = 0.1 (s = {PRIVATE_SAMPLE_SIZE}, {seeds}"
          " seeds; noise scale m / epsilon per cell)\n")
    print("| dataset | " + " | ".join(f"m={m}, p={p}" for m in counts for p in (2, 10)) + " |")
    print("|---|" + "---|" * (2 * len(counts)))
    for name in names:
        X, y = load(data, name)
        cells = []
        for m in counts:
            for p in (2, 10):
                res = [federated_auc(X, y, p, "0.1", 2000 + seed, PRIVATE_SAMPLE_SIZE, ["mass"],
                                     n_tables=m)["mass"] for seed in range(seeds)]
                cells.append(f"{np.mean(res):.1f}")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    print()


def speed(data: Path, names: Sequence[str], repeats: int) -> None:
    if "cover" not in names:
        return
    X, _ = load(data, "cover")
    print(f"## 3. Speed on cover ({len(X)} x {X.shape[1]}), best of {repeats}\n")
    det = LSHiTables(random_state=0)
    forest = IsolationForest(n_estimators=100, random_state=0, n_jobs=1)
    t_fit = best_of(repeats, lambda: det.fit(X))
    t_score = best_of(repeats, lambda: det.decision_function(X))
    t_cal = best_of(repeats, lambda: LSHiTables(random_state=0).fit(X).threshold_)
    f_fit = best_of(repeats, lambda: forest.fit(X))
    f_score = best_of(repeats, lambda: forest.score_samples(X))
    family = det.family_

    def stream() -> None:
        for _ in family.iter_flat_index(X):
            pass

    t_hash = best_of(repeats, stream)
    lsh_total, if_total = t_fit + t_score, f_fit + f_score
    print("| | fit s | score s | fit + score s |")
    print("|---|---|---|---|")
    print(f"| LSHiTables (m=100, s=1000; fit builds the tables) | {t_fit:.2f} | "
          f"{t_score:.2f} | {lsh_total:.2f} |")
    print(f"| IsolationForest(n_estimators=100), n_jobs=1 | {f_fit:.2f} | {f_score:.2f} | "
          f"{if_total:.2f} |")
    print(f"\nfit + score: LSHiTables is {if_total / lsh_total:.1f}x faster than IsolationForest"
          f" (target >= 3x, goal 5x). fit + the training rows' scores and `threshold_` (computed"
          f" on first access, as PyOD's fit would): {t_cal:.2f} s, {if_total / t_cal:.1f}x."
          f" Hashing throughput (flat indices streamed in row blocks, single thread): "
          f"{len(X) * family.n_tables / t_hash / 1e6:.0f} M record-tables/s ({len(X)} records"
          f" x {family.n_tables} tables in {t_hash:.2f} s).\n")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 / 3 seeds instead of 5 / 10")
    parser.add_argument("--datasets", nargs="+", default=[n for n, _, _ in PAPER])
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args(argv)
    if not args.data.is_dir():
        parser.error(f"datasets directory {args.data} not found")
    seeds_c, seeds_f = (2, 3) if args.quick else (5, 10)
    start = time.perf_counter()
    print("# Detector benchmark\n")
    print(f"Machine: {machine()}. Mode: {'quick' if args.quick else 'full'}."
          f" Command: `.venv/bin/python tests/benchmarks/bench_detectors.py"
          f"{' --quick' if args.quick else ''}`.\n")
    centralised(args.data, args.datasets, seeds_c)
    federated(args.data, args.datasets, seeds_f, ["1", "0.1"])
    ablation(args.data, args.datasets, 3)
    few_tables(args.data, args.datasets, 3 if args.quick else 10)
    speed(args.data, args.datasets, 5)
    print(f"Total benchmark time: {time.perf_counter() - start:.0f} s.")


if __name__ == "__main__":
    main()
