"""Detector benchmark: accuracy vs the LSH iTables paper, federated private AUC, speed.

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_detectors.py            # full run (BENCHMARKS.md)
    .venv/bin/python tests/benchmarks/bench_detectors.py --quick    # fewer seeds
    .venv/bin/python tests/benchmarks/bench_detectors.py --datasets breastw cardio_dedup
    .venv/bin/python tests/benchmarks/bench_detectors.py --speed-only   # section 3 only

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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lsh_trailing_kit import digits_one_vs_rest, trailing_probe  # noqa: E402

from common.detectors import GridKNN, LSHiTables  # noqa: E402
from common.detectors.lsh_itables import PRIVATE_SAMPLE_SIZE, Scoring  # noqa: E402
from common.histograms.hashing import derive_lsh_family  # noqa: E402
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
# shared sets without a figure in the paper (shown, not compared)
EXTRA = ["cardio", "satimage-2", "thyroid", "http", "lympho", "lymphography_campos", "wbc",
         "wdbc", "heart", "adult"]
COMPARED = {"breastw", "pima", "cardio_dedup", "mnist", "musk", "pendigits",
            "satimage-2_dedup", "thyroid_dedup", "shuttle"}
EVAL_ROWS = 20_000  # GridKNN and exact k-NN score a subsample of larger sets
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
          " GridKNN: its defaults (`GridKNN()`: the public rule of `common.detectors.rules`,"
          " 8 bins over the features up to d = 10, else over 6 seed-derived projections,"
          " k = max(10, n / 100), depth 3, weighted), exact counts. 10-NN: exact distance to"
          " the 10th neighbour on min-max scaled data (scikit-learn). GridKNN and 10-NN score"
          f" at most {EVAL_ROWS} sampled rows. Times are fit + score of all rows, mean per"
          " seed. **LSH < IF - 2** marks a set where LSH iTables trails IsolationForest by more"
          " than 2 points (docs/DETECTORS.md says why).\n")
    print("| dataset | n | d | paper | LSHiTables AUC | diff | LSH s | IForest AUC | IForest s"
          " | GridKNN AUC (defaults) | 10-NN AUC |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    diffs: list[float] = []
    trailing: list[str] = []
    grid_fail: list[str] = []
    for name, label, paper in [*PAPER, *((e, e, float("nan")) for e in EXTRA)]:
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
        rows = np.arange(len(X))
        if len(X) > EVAL_ROWS:
            rows = np.sort(np.random.default_rng(0).choice(len(X), EVAL_ROWS, replace=False))
        grid = 100 * roc_auc_score(y[rows], GridKNN().fit(X).decision_function(X[rows]))
        knn = knn_auc(X, y, rows)
        if knn > 70 and grid < 60:
            grid_fail.append(name)
        auc = 100 * float(np.mean(lsh_auc))
        diff = auc - paper
        shown = f"{diff:+.1f}" if name in COMPARED else "" if np.isnan(diff) else f"({diff:+.1f})"
        if name in COMPARED:
            diffs.append(diff)
        forest_auc = 100 * float(np.mean(if_auc))
        flag = " **LSH < IF - 2**" if auc < forest_auc - 2 else ""
        if flag:
            trailing.append(f"{name} ({auc:.1f} vs {forest_auc:.1f})")
        shown_paper = "n/a" if np.isnan(paper) else f"{paper:.1f}"
        print(f"| {label} ({name}) | {len(X)} | {X.shape[1]} | {shown_paper} | {auc:.1f} "
              f"± {100 * np.std(lsh_auc):.1f}{flag} | {shown} | {np.mean(lsh_t):.2f} | "
              f"{forest_auc:.1f} | {np.mean(if_t):.2f} | {grid:.1f} | {knn:.1f} |", flush=True)
    print(f"\nLSH iTables trails IsolationForest by more than 2 points on: "
          f"{', '.join(trailing) or 'none'}. GridKNN (defaults) below 60 where 10-NN is above"
          f" 70 on: {', '.join(grid_fail) or 'none'} (target: none).")
    if diffs:
        print(f"\nCompared datasets: mean diff {np.mean(diffs):+.2f} points, worst "
              f"{min(diffs):+.1f} (target: mean >= -1.5, none below -3). Cover is shown, not"
              " compared (the paper used the 54-attribute version).\n")


def knn_auc(X: np.ndarray, y: np.ndarray, rows: np.ndarray) -> float:
    """AUC of the exact distance to the 10th neighbour (min-max scaled, the row excluded)."""
    from sklearn.neighbors import NearestNeighbors

    lo, hi = X.min(axis=0), X.max(axis=0)
    Xs = (X - lo) / np.where(hi > lo, hi - lo, 1.0)
    dist, _ = NearestNeighbors(n_neighbors=11).fit(Xs).kneighbors(Xs[rows])
    return 100 * float(roc_auc_score(y[rows], dist[:, 10]))


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


def speed(data: Path, names: Sequence[str], pairs: int) -> None:
    """Paired, interleaved runs of LSHiTables and IsolationForest on cover: each pair runs
    both (alternating which goes first), each run builds a fresh detector and fits and
    scores all rows, single-threaded (n_jobs=1, BLAS limited to one thread)."""
    if "cover" not in names:
        return
    from threadpoolctl import threadpool_limits

    X, _ = load(data, "cover")
    print(f"## 3. Speed on cover ({len(X)} x {X.shape[1]}), {pairs} paired runs\n")

    def lsh() -> tuple[float, float]:
        det = LSHiTables(random_state=0)
        start = time.perf_counter()
        det.fit(X)
        mid = time.perf_counter()
        det.decision_function(X)
        return mid - start, time.perf_counter() - mid

    def forest() -> tuple[float, float]:
        f = IsolationForest(n_estimators=100, random_state=0, n_jobs=1)
        start = time.perf_counter()
        f.fit(X)
        mid = time.perf_counter()
        f.score_samples(X)
        return mid - start, time.perf_counter() - mid

    load_before = os.getloadavg()[0]
    runs: dict[str, list[tuple[float, float]]] = {"lsh": [], "forest": []}
    with threadpool_limits(1):
        lsh()  # first call imports and warms up; not counted
        for i in range(pairs):
            order = ("lsh", "forest") if i % 2 == 0 else ("forest", "lsh")
            for name in order:
                runs[name].append(lsh() if name == "lsh" else forest())
        t_cal = min(best_of(1, lambda: LSHiTables(random_state=0).fit(X).threshold_)
                    for _ in range(3))
        family = LSHiTables(random_state=0).fit(X).family_

        def stream() -> None:
            for _ in family.iter_flat_index(X):
                pass

        t_hash = best_of(3, stream)
    load_after = os.getloadavg()[0]
    lsh_t, if_t = np.array(runs["lsh"]), np.array(runs["forest"])
    ratios = if_t.sum(axis=1) / lsh_t.sum(axis=1)
    med_ratio = float(np.median(ratios))
    print("| median of the runs | fit s | score s | fit + score s |")
    print("|---|---|---|---|")
    for label, t in (("LSHiTables (m=100, s=1000; fit builds the tables)", lsh_t),
                     ("IsolationForest(n_estimators=100), n_jobs=1", if_t)):
        print(f"| {label} | {np.median(t[:, 0]):.3f} | {np.median(t[:, 1]):.3f} | "
              f"{np.median(t.sum(axis=1)):.3f} |")
    verdict = "met" if med_ratio >= 6 else "NOT met"
    robust = "every pair" if ratios.min() >= 6 else f"{int((ratios >= 6).sum())} of {pairs} pairs"
    print(f"\nfit + score, IsolationForest time / LSHiTables time per pair: median"
          f" **{med_ratio:.1f}x**, min {ratios.min():.1f}x, max {ratios.max():.1f}x over"
          f" {pairs} pairs (target >= 6x: {verdict}; >= 6x in {robust}). Load average"
          f" {load_before:.1f} before, {load_after:.1f} after. fit + the training rows' scores"
          f" and `threshold_` (computed on first access, as PyOD's fit would; best of 3):"
          f" {t_cal:.3f} s. Hashing throughput of the family's reference path"
          f" (`LSHFamily.iter_flat_index`, single thread, best of 3):"
          f" {len(X) * family.n_tables / t_hash / 1e6:.0f} M record-tables/s. Default"
          " install (numpy only); no accelerated kernel.\n")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 / 3 seeds instead of 5 / 10")
    parser.add_argument("--datasets", nargs="+", default=[n for n, _, _ in PAPER] + EXTRA)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--speed-only", action="store_true",
                        help="only section 3 (speed on cover)")
    parser.add_argument("--pairs", type=int, default=11,
                        help="paired LSH / IsolationForest runs in section 3")
    args = parser.parse_args(argv)
    if not args.data.is_dir():
        parser.error(f"datasets directory {args.data} not found")
    seeds_c, seeds_f = (2, 3) if args.quick else (5, 10)
    start = time.perf_counter()
    print("# Detector benchmark\n")
    print(f"Machine: {machine()}. Mode: {'quick' if args.quick else 'full'}."
          f" Command: `.venv/bin/python tests/benchmarks/bench_detectors.py"
          f"{' ' + ' '.join(sys.argv[1:]) if sys.argv[1:] else ''}`.\n")
    if not args.speed_only:
        centralised(args.data, args.datasets, seeds_c)
        digits_one_vs_rest(seeds_c)
        trailing_probe(lambda name: load(args.data, name), args.datasets, seeds_c)
        federated(args.data, args.datasets, seeds_f, ["1", "0.1"])
        ablation(args.data, args.datasets, 3)
        few_tables(args.data, args.datasets, 3 if args.quick else 10)
    speed(args.data, args.datasets, args.pairs)
    print(f"Total benchmark time: {time.perf_counter() - start:.0f} s.")


if __name__ == "__main__":
    main()
