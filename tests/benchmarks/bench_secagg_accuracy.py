"""Accuracy of federated LSH iTables: independent noise vs secure aggregation (issue 11).

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_secagg_accuracy.py             # 10 seeds
    .venv/bin/python tests/benchmarks/bench_secagg_accuracy.py --seeds 3   # quicker
    .venv/bin/python tests/benchmarks/bench_secagg_accuracy.py --sweep     # the rule's evidence
    .venv/bin/python tests/benchmarks/bench_secagg_accuracy.py --speed     # sampler cost

Prints markdown (BENCHMARKS.md, section "Secure aggregation accuracy"). In-process, no
network: the coordinator's view is modelled exactly.

- independent: every participant releases its exact histogram plus its own full discrete
  Laplace noise of scale ``m / epsilon`` (OpenDP, ``common.noise.laplace.add_discrete_laplace``);
  the merged model carries ``p`` noise draws per cell.
- secure: the masked sum reveals the sum of the exact histograms plus the sum of the ``p``
  participants' Pólya shares (``common.noise.sample_noise_share``, the real sampler), each
  sized for ``h_min = p`` (no tolerated dropouts or colluders), i.e. exactly ONE discrete
  Laplace of scale ``m / epsilon`` per cell. The masks cancel exactly, so they are left out.
- non-private: the sum of the exact histograms, m = 100, s = 16.

Each participant scores its own records with the merged model (scoring ``mass``); AUC is the
mean over participants (with both classes) and seeds. The public bounds are the dataset's
min/max (standing in for the ranges a study declares). ``m`` and ``s`` "chosen" are
:func:`chosen`, the rule this benchmark measured (since superseded for studies by
``common.detectors.rules.study_lsh``), from public inputs only (epsilon, mode, p and the
declared expected records per participant, here ``n / p`` rounded).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from common.detectors.lsh_itables import cell_scores  # noqa: E402
from common.histograms.hashing import derive_lsh_family  # noqa: E402
from common.noise import sample_noise_share  # noqa: E402
from common.noise.laplace import add_discrete_laplace  # noqa: E402
from common.noise.planning import MAX_TABLES, MIN_TABLES, SIZES, score_snr  # noqa: E402

DATA = Path(__file__).resolve().parents[3] / "shared" / "datasets"
DATASETS = ["breastw", "cardio", "thyroid", "pendigits", "shuttle", "satimage-2"]
PARTICIPANTS = [2, 5, 10, 20]
EPSILONS = ["1", "0.3", "0.1", "0.03"]
DEFAULT_M, DEFAULT_S = 100, 16


def load(data: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    arrays = np.load(data / f"{name}.npz")
    return arrays["X"], arrays["y"].astype(int)


class Split:
    """One seed's split of a dataset over ``p`` participants, hashed once per family."""

    def __init__(self, X: np.ndarray, y: np.ndarray, p: int, seed: int) -> None:
        rng = np.random.default_rng(seed)  # data split only, not noise
        self.X, self.y, self.seed = X, y, seed
        self.parts = np.array_split(rng.permutation(len(X)), p)
        self._cache: dict[tuple[int, int], tuple[object, np.ndarray, list[np.ndarray]]] = {}

    def hashed(self, m: int, s: int) -> tuple[object, np.ndarray, list[np.ndarray]]:
        """(family, flat index of every row, exact histogram of each participant)."""
        if (m, s) not in self._cache:
            family = derive_lsh_family(self.seed.to_bytes(8, "little"), self.X.min(axis=0),
                                       self.X.max(axis=0), m, s)
            flat = family.flat_index(self.X)
            hists = [np.bincount(flat[part].ravel(), minlength=family.n_cells)
                     for part in self.parts]
            self._cache = {(m, s): (family, flat, hists)}
        return self._cache[(m, s)]

    def auc(self, m: int, s: int, mode: str, epsilon: str) -> float:
        family, flat, hists = self.hashed(m, s)
        n_cells = family.n_cells  # type: ignore[attr-defined]
        merged = np.sum(hists, axis=0).astype(np.int64)
        p = len(self.parts)
        if mode == "independent":
            merged = sum((add_discrete_laplace(h, m, Decimal(epsilon)) for h in hists),
                         start=np.zeros(n_cells, dtype=np.int64))
        elif mode == "secure":
            for _ in range(p):
                merged += sample_noise_share(n_cells, m, epsilon, p)
        elif mode != "none":
            raise ValueError(mode)
        scores = -np.take(cell_scores(family, merged, "mass"), flat).mean(axis=1)  # type: ignore[arg-type]
        aucs = [roc_auc_score(self.y[part], scores[part]) for part in self.parts
                if 0 < self.y[part].sum() < len(part)]
        return 100 * float(np.mean(aucs))


TARGET_SNR, GOOD_TABLES = 3.0, 40


def chosen(mode: str, epsilon: str, p: int, n: int) -> tuple[int, int]:
    """The measured rule: keep ``Z >= 3`` (``common.noise.planning.score_snr``) with the
    largest size in (16, 8, 4) that allows at least 40 tables, ``m = min(100, floor((Z(m=1) /
    3)^2))``; if even size 4 cannot, size 4 and ``m`` down to 10."""
    records = round(n / p)

    def tables_for(size: int) -> int:
        z1 = score_snr(Decimal(epsilon), mode, p, records, 1, size)  # type: ignore[arg-type]
        return min(MAX_TABLES, math.floor((z1 / TARGET_SNR) ** 2))

    fits = [(m, size) for size in SIZES if (m := tables_for(size)) >= GOOD_TABLES]
    return fits[0] if fits else (max(MIN_TABLES, tables_for(SIZES[-1])), SIZES[-1])


SWEEP = [("1", 10, "independent"), ("0.1", 10, "independent"), ("0.1", 10, "secure"),
         ("0.03", 20, "independent"), ("0.03", 2, "secure")]
Z_BINS = [0.0, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, float("inf")]


def sweep(data: Path, names: Sequence[str], seeds: int) -> None:
    """The evidence for the rule: AUC of every (m, s) in a grid under several noise levels,
    grouped by the score SNR Z the planner computes for it."""
    grid = [(m, s) for m in (10, 20, 40, 100) for s in (4, 8, 16)]
    by_bin: dict[str, dict[int, list[float]]] = {}
    for name in names:
        X, y = load(data, name)
        for eps, p, mode in SWEEP:
            splits = [Split(X, y, p, 100 + seed) for seed in range(seeds)]
            for m, s in grid:
                z = score_snr(eps, mode, p, round(len(X) / p), m, s)  # type: ignore[arg-type]
                b = int(np.searchsorted(Z_BINS, z, side="right")) - 1
                auc = float(np.mean([sp.auc(m, s, mode, eps) for sp in splits]))
                by_bin.setdefault(name, {}).setdefault(b, []).append(auc)
        print(f"<!-- sweep {name}: done -->", flush=True)
    print(f"### Sweep: AUC by score SNR Z ({seeds} seeds; m in 10, 20, 40, 100; s in 4, 8, 16;"
          " settings " + ", ".join(f"{e}/{p}/{mo}" for e, p, mo in SWEEP) + ")\n")
    labels = [f"{lo:g}-{hi:g}" for lo, hi in zip(Z_BINS, Z_BINS[1:], strict=False)]
    print("| dataset | " + " | ".join(f"Z {lab}" for lab in labels) + " |")
    print("|---|" + "---|" * len(labels))
    for name, bins in by_bin.items():
        cells = [f"{np.mean(bins[b]):.1f} ({len(bins[b])})" if b in bins else "" for b in
                 range(len(labels))]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()


def sampler_speed(repeats: int = 5) -> None:
    """Time of one participant's noise for a release: m = 100 tables (s = 16), n = 20, next to
    OpenDP's full discrete Laplace on the same cells (the independent mode's noise)."""
    family = derive_lsh_family(b"speed", [0.0] * 9, [1.0] * 9, DEFAULT_M, DEFAULT_S)
    cells = family.n_cells
    zeros = np.zeros(cells, dtype=np.int64)

    def best(fn: object) -> float:
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()  # type: ignore[operator]
            times.append(time.perf_counter() - t)
        return min(times)

    print("### Noise sampling cost per release (best of 5, one core)\n")
    print("| cells | Pólya share (h_min = 20, epsilon = 0.1) | Pólya share, 3200 cells, epsilon"
          " = 0.03 | OpenDP discrete Laplace (independent mode) |")
    print("|---|---|---|---|")
    share = best(lambda: sample_noise_share(cells, DEFAULT_M, "0.1", 20))
    big = best(lambda: sample_noise_share(3200, DEFAULT_M, "0.03", 20))
    full = best(lambda: add_discrete_laplace(zeros, DEFAULT_M, Decimal("0.1")))
    print(f"| {cells} | {1000 * share:.1f} ms | {1000 * big:.1f} ms | {1000 * full:.1f} ms |\n")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--datasets", nargs="+", default=DATASETS)
    parser.add_argument("--participants", nargs="+", type=int, default=PARTICIPANTS)
    parser.add_argument("--epsilons", nargs="+", default=EPSILONS)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--speed", action="store_true", help="only time the noise samplers")
    parser.add_argument("--sweep", action="store_true",
                        help="only the (m, s) sweep grouped by score SNR (at most 2 seeds)")
    args = parser.parse_args(argv)
    if not args.data.is_dir():
        parser.error(f"datasets directory {args.data} not found")
    start = time.perf_counter()
    if args.speed:
        sampler_speed()
        return
    if args.sweep:
        sweep(args.data, args.datasets, min(args.seeds, 2))
        return
    cols = ["indep. m=100", "indep. chosen", "secure chosen", "non-private"]
    # results[(eps, p)][dataset] = [4 AUCs]
    results: dict[tuple[str, int], dict[str, list[float]]] = {}
    picks: dict[tuple[str, int, str], tuple[int, int, int, int]] = {}
    for name in args.datasets:
        X, y = load(args.data, name)
        for p in args.participants:
            splits = [Split(X, y, p, seed) for seed in range(args.seeds)]
            for eps in args.epsilons:
                mi, si = chosen("independent", eps, p, len(X))
                ms, ss = chosen("secure", eps, p, len(X))
                picks[(eps, p, name)] = (mi, si, ms, ss)
                runs = [(DEFAULT_M, DEFAULT_S, "independent"), (mi, si, "independent"),
                        (ms, ss, "secure"), (DEFAULT_M, DEFAULT_S, "none")]
                row = [float(np.mean([sp.auc(m, s, mode, eps) for sp in splits]))
                       for m, s, mode in runs]
                results.setdefault((eps, p), {})[name] = row
        print(f"<!-- {name}: done at {time.perf_counter() - start:.0f} s -->", flush=True)
    print(f"## Secure aggregation accuracy ({args.seeds} seeds)\n")
    for eps in args.epsilons:
        print(f"### epsilon = {eps} per participant\n")
        print("| p | dataset | " + " | ".join(cols) + " | chosen m, s (indep. / secure) |")
        print("|---|---|" + "---|" * (len(cols) + 1))
        for p in args.participants:
            rows = results[(eps, p)]
            for name, row in rows.items():
                mi, si, ms, ss = picks[(eps, p, name)]
                print(f"| {p} | {name} | " + " | ".join(f"{v:.1f}" for v in row)
                      + f" | {mi}, {si} / {ms}, {ss} |")
            mean = np.mean(list(rows.values()), axis=0)
            print(f"| {p} | **mean** | " + " | ".join(f"**{v:.1f}**" for v in mean) + " | |")
        print()
    print(f"Total benchmark time: {time.perf_counter() - start:.0f} s.")


if __name__ == "__main__":
    main()
