"""DP-KCCM benchmark (issue 9): federated DP k-means with fusion vs without vs baselines.

Datasets: DPM's Synth-10d (scikit-learn ``make_blobs``, 64 centres, box (-100, 100),
standard deviation 1, seed 42; ``--synth-n`` points, 100 000 in the papers) and
scikit-learn's bundled wine and digits, ``k`` = number of classes. Every dataset is mapped to
``[-1, 1]^d`` by its *declared* public bounds (synth: the generator's box; digits: 0..16;
wine: the dataset's min/max rounded outward, standing in for a schema's bounds) before any
method runs, and inertia is measured there.

Methods, per epsilon and participant count ``p`` (records split evenly, each participant
spends the full epsilon on its own share, independent noise):
  fusion    ``over * k`` seed-initialised centroids, ``T`` rounds, fused to ``k``
  fusion + prune  the same, dropping centroids under the last count floor before fusing
  no fusion ``k`` seed-initialised centroids, ``T`` rounds (same budget split)
  sklearn   non-private ``sklearn.cluster.KMeans`` (k-means++, 10 inits), once
  diffprivlib ``diffprivlib.models.KMeans`` (centralised, p = 1 only; if importable)

    .venv/bin/python tests/benchmarks/bench_cohorts.py [--runs 5] [--synth-n 100000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits, load_wine, make_blobs

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from common.cohorts import KMeansPlan, fit_federated  # noqa: E402
from common.cohorts.kmeans import assign  # noqa: E402

Data = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _dp_kmeans() -> Callable[..., object] | None:
    """diffprivlib's KMeans, or None. diffprivlib 0.6.6 imports two names scikit-learn 1.9
    removed from ``sklearn.tree._tree`` (used by its forests only); supplied here."""
    try:
        import sklearn.tree._tree as tree

        for name, value in (("DOUBLE", np.float64), ("DTYPE", np.float32)):
            if not hasattr(tree, name):
                setattr(tree, name, value)
        from diffprivlib.models import KMeans as DPKMeans
    except ImportError:
        return None
    return DPKMeans  # type: ignore[no-any-return]


def datasets(synth_n: int) -> dict[str, Data]:
    x, y = make_blobs(synth_n, n_features=10, centers=64, cluster_std=1.0,
                      center_box=(-100, 100), random_state=42)
    out = {"Synth-10d": (x, y, np.full(10, -100.0), np.full(10, 100.0))}
    xd, yd = load_digits(return_X_y=True)
    out["digits"] = (xd, yd, np.zeros(64), np.full(64, 16.0))
    xw, yw = load_wine(return_X_y=True)
    mag = 10.0 ** np.floor(np.log10(np.abs(xw).max(0)))
    out["wine"] = (xw, yw, np.floor(xw.min(0) / mag) * mag, np.ceil(xw.max(0) / mag) * mag)
    return out


def normalise(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return 2.0 * (np.clip(x, lo, hi) - lo) / (hi - lo) - 1.0


def scores(x: np.ndarray, y: np.ndarray, centres: np.ndarray) -> tuple[float, float]:
    """(inertia, purity) of ``x`` assigned to its nearest centre."""
    labels = assign(x, centres)
    inertia = float(((x - centres[labels]) ** 2).sum())
    purity = sum(np.bincount(y[labels == c]).max() for c in np.unique(labels)) / len(y)
    return inertia, float(purity)


def run(name: str, data: Data, eps_list: list[str], ps: list[int], runs: int, over: int,
        rounds: int, dp_kmeans: Callable[..., object] | None) -> list[str]:
    x, y, lo, hi = data
    xn = normalise(x, lo, hi)
    d, k = x.shape[1], len(np.unique(y))
    box_lo, box_hi = np.full(d, -1.0), np.full(d, 1.0)
    ref = KMeans(k, n_init=10, random_state=0).fit(xn).cluster_centers_
    inertia, purity = scores(xn, y, ref)
    rows = [f"| {name} | - | - | sklearn KMeans (non-private) | {inertia:.4g} | {purity:.3f} |"]
    rng = np.random.default_rng(0)  # splits records among participants; not privacy noise
    for eps in eps_list:
        for p in ps:
            for label, factor, prune in (("fusion", over, False),
                                         ("fusion + prune", over, True), ("no fusion", 1, False)):
                plan = KMeansPlan(lo=box_lo, hi=box_hi, k=k, epsilon=eps, over=factor,
                                  rounds=rounds)
                got = []
                for r in range(runs):
                    parts = np.array_split(xn[rng.permutation(len(xn))], p)
                    cents, _, _ = fit_federated(parts, plan, f"{name}/{r}".encode(), prune)
                    got.append(scores(xn, y, cents))
                mi, mp = np.mean(got, axis=0)
                si, sp = np.std(got, axis=0)
                rows.append(f"| {name} | {eps} | {p} | {label} (n={factor}, T={rounds}) | "
                            f"{mi:.4g} ± {si:.2g} | {mp:.3f} ± {sp:.3f} |")
            if p == 1 and dp_kmeans is not None:
                got = []
                for r in range(runs):
                    model = dp_kmeans(n_clusters=k, epsilon=float(eps),
                                      bounds=(box_lo, box_hi), random_state=r)
                    got.append(scores(xn, y, model.fit(xn).cluster_centers_))  # type: ignore[attr-defined]
                mi, mp = np.mean(got, axis=0)
                si, sp = np.std(got, axis=0)
                rows.append(f"| {name} | {eps} | 1 | diffprivlib KMeans (centralised) | "
                            f"{mi:.4g} ± {si:.2g} | {mp:.3f} ± {sp:.3f} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--synth-n", type=int, default=100_000)
    ap.add_argument("--eps", nargs="+", default=["0.5", "1", "2", "5"])
    ap.add_argument("--participants", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--over", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--datasets", nargs="+", default=["Synth-10d", "wine", "digits"])
    args = ap.parse_args()
    dp_kmeans = _dp_kmeans()
    start = time.perf_counter()
    print(f"runs={args.runs}, Synth-10d n={args.synth_n}, T={args.rounds}, fusion n={args.over},"
          f" count share 0.2, diffprivlib {'yes' if dp_kmeans else 'not importable'}\n")
    print("| dataset | epsilon | p | method | inertia (mean ± sd) | purity (mean ± sd) |")
    print("|---|---|---|---|---|---|")
    all_data = datasets(args.synth_n)
    for name in args.datasets:
        for row in run(name, all_data[name], args.eps, args.participants, args.runs, args.over,
                       args.rounds, dp_kmeans):
            print(row, flush=True)
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
