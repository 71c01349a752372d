"""DP-KCCM benchmark (issue 9): federated DP k-means with fusion vs without vs baselines.

Datasets: DPM's Synth-10d and Synth-100d (scikit-learn ``make_blobs``, 64 centres, box
(-100, 100), standard deviation 1, seed 42; ``--synth-n`` points, 100 000 in the papers) and
scikit-learn's bundled wine and digits, ``k`` = number of classes. Every dataset is mapped to
``[-1, 1]^d`` by its *declared* public bounds (synth: the generator's box; digits: 0..16;
wine: the dataset's min/max rounded outward, standing in for a schema's bounds) before any
method runs, and inertia is measured there.

Methods, per epsilon, participant count ``p`` and budget schedule (``even`` or DP-KCCM's
``adaptive`` split over the rounds, :func:`common.cohorts.plan.round_weights`; records split
evenly, each participant spends the full epsilon on its own share, independent noise):
  fusion    ``over * k`` seed-initialised centroids, ``T`` rounds, fused to ``k``
  fusion + prune  the same, dropping centroids under the last count floor before fusing
  no fusion ``k`` seed-initialised centroids, ``T`` rounds (same budget split)
  sklearn   non-private ``sklearn.cluster.KMeans`` (k-means++, 10 inits), once
  diffprivlib ``diffprivlib.models.KMeans`` (centralised, p = 1 only; if importable)

Sums are noised with discrete Laplace (L1 sensitivity, the default) or, with ``--sum-noise
gaussian``, the discrete Gaussian at L2 sensitivity (the box's half-diagonal) for
``delta = 1 / (n sqrt n)`` over all rounds, ``n`` the dataset's size declared as public.

    nice -n 10 .venv/bin/python tests/benchmarks/bench_cohorts.py [--runs 5] [--synth-n 100000]
        [--eps 1] [--participants 10] [--schedules even adaptive] [--datasets Synth-100d]
        [--sum-noise gaussian]

A comment line is printed after every run, so a cut-short run still shows what it did.
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


def datasets(synth_n: int, names: list[str]) -> dict[str, Data]:
    out: dict[str, Data] = {}
    for d in (10, 100):
        if f"Synth-{d}d" in names:
            x, y = make_blobs(synth_n, n_features=d, centers=64, cluster_std=1.0,
                              center_box=(-100, 100), random_state=42)
            out[f"Synth-{d}d"] = (x, y, np.full(d, -100.0), np.full(d, 100.0))
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


METHODS = {"fusion": (True, False), "prune": (True, True), "none": (False, False)}
LABELS = {"fusion": "fusion", "prune": "fusion + prune", "none": "no fusion"}


def row(cells: str, got: list[tuple[float, float]]) -> str:
    (mi, mp), (si, sp) = np.mean(got, axis=0), np.std(got, axis=0)
    return (f"| {cells} | {len(got)} | {mi:.4g} ± {si:.2g} | {mp:.3f} ± {sp:.3f} |")


def run(name: str, data: Data, args: argparse.Namespace,
        dp_kmeans: Callable[..., object] | None) -> None:
    """Print the rows of one dataset as they finish (and one comment line per run)."""
    x, y, lo, hi = data
    xn = normalise(x, lo, hi)
    d, k = x.shape[1], len(np.unique(y))
    box_lo, box_hi = np.full(d, -1.0), np.full(d, 1.0)
    if not args.skip_reference:
        ref = KMeans(k, n_init=10, random_state=0).fit(xn).cluster_centers_
        print(row(f"{name} | - | - | - | sklearn KMeans (non-private)",
                  [scores(xn, y, ref)]), flush=True)
    rng = np.random.default_rng(0)  # splits records among participants; not privacy noise
    for eps in args.eps:
        for p in args.participants:
            for method in args.methods:
                if method == "diffprivlib":
                    continue
                fused, prune = METHODS[method]
                factor = args.over if fused else 1
                for schedule in args.schedules:
                    gaussian = args.sum_noise == "gaussian"
                    plan = KMeansPlan(lo=box_lo, hi=box_hi, k=k, epsilon=eps, over=factor,
                                      rounds=args.rounds, schedule=schedule,
                                      sum_noise=args.sum_noise,
                                      declared_n=len(xn) if gaussian else None)
                    got = []
                    for r in range(args.runs):
                        began = time.process_time()
                        parts = np.array_split(xn[rng.permutation(len(xn))], p)
                        cents, _, _ = fit_federated(parts, plan, f"{name}/{r}".encode(), prune)
                        got.append(scores(xn, y, cents))
                        print(f"<!-- {name} eps={eps} p={p} {method} {schedule} run {r + 1}: "
                              f"{got[-1][0]:.4g} {got[-1][1]:.3f} "
                              f"({time.process_time() - began:.0f} s CPU) -->", flush=True)
                    noise = ", Gaussian sums" if gaussian else ""
                    print(row(f"{name} | {eps} | {p} | {schedule} | {LABELS[method]} "
                              f"(n={factor}, T={args.rounds}{noise})", got), flush=True)
        if "diffprivlib" in args.methods and dp_kmeans is not None:
            got = []
            for r in range(args.runs):
                model = dp_kmeans(n_clusters=k, epsilon=float(eps),
                                  bounds=(box_lo, box_hi), random_state=r)
                got.append(scores(xn, y, model.fit(xn).cluster_centers_))  # type: ignore[attr-defined]
            print(row(f"{name} | {eps} | 1 | - | diffprivlib KMeans (centralised)", got),
                  flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--synth-n", type=int, default=100_000)
    ap.add_argument("--eps", nargs="+", default=["0.5", "1", "2", "5"])
    ap.add_argument("--participants", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--over", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--schedules", nargs="+", default=["even", "adaptive"],
                    choices=["even", "adaptive"])
    ap.add_argument("--methods", nargs="+", default=["fusion", "prune", "none", "diffprivlib"],
                    choices=["fusion", "prune", "none", "diffprivlib"])
    ap.add_argument("--sum-noise", default="laplace", choices=["laplace", "gaussian"],
                    help="noise on the per-cluster sums (gaussian: delta = 1/(n sqrt n))")
    ap.add_argument("--skip-reference", action="store_true",
                    help="skip the non-private sklearn KMeans row (slow on Synth-100d)")
    ap.add_argument("--datasets", nargs="+", default=["Synth-10d", "wine", "digits"],
                    choices=["Synth-10d", "Synth-100d", "wine", "digits"])
    args = ap.parse_args()
    dp_kmeans = _dp_kmeans()
    start = time.perf_counter()
    print(f"runs={args.runs}, Synth n={args.synth_n}, T={args.rounds}, fusion n={args.over},"
          f" count share 0.2, {args.sum_noise} sums,"
          f" diffprivlib {'yes' if dp_kmeans else 'not importable'}\n")
    print("| dataset | epsilon | p | schedule | method | runs | inertia (mean ± sd) "
          "| purity (mean ± sd) |")
    print("|---|---|---|---|---|---|---|---|")
    all_data = datasets(args.synth_n, args.datasets)
    for name in args.datasets:
        run(name, all_data[name], args, dp_kmeans)
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
