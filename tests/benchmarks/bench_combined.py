"""Combined score benchmark: LSH iTables and the grid, both with the public rules' parameters,
federated at epsilon 1 per detector and release, p = 10 independent releases, weighted by
:func:`common.detectors.combine.public_weights` (public inputs only).

Run from the repository root (a few minutes on one shared core)::

    nice -n 10 .venv/bin/python tests/benchmarks/bench_combined.py [--seeds 2] [--datasets ...]

In-process, as ``bench_rules.py`` (``tests/benchmarks/rules_kit.py``): the merged counts are
the exact counts of all records plus the sum of ``p`` discrete Laplace draws per cell (scale
``m / epsilon`` for LSH, ``1 / epsilon`` for the dense grid), drawn with the benchmark's
equal-distribution fast sampler. Each participant would score its own records with the merged
models; the AUC is over an evaluation subsample of at most ``EVAL`` records. The combined
score ranks within that subsample (a participant ranks within its own file).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import rules_kit as kit  # noqa: E402

from common.detectors import GridKNN  # noqa: E402
from common.detectors.combine import DetectorPlan, combine, public_weights  # noqa: E402
from common.detectors.rules import grid_rule, lsh_rule  # noqa: E402
from common.histograms.grid import GridSpec, derive_projection  # noqa: E402

DATA = Path(__file__).resolve().parents[3] / "shared" / "datasets"
EVAL = 3000
P, EPS = 10, 1.0


def run(X: np.ndarray, y: np.ndarray, seed: int) -> dict[str, float]:
    n, d = X.shape
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(n, EVAL, replace=False)) if n > EVAL else np.arange(n)
    expected = n // P
    lsh = lsh_rule(d=d, expected_records=expected, cohort_size=P, epsilon=EPS)
    h = kit.hashed(X, rows, seed, lsh.sample_size)
    if lsh.n_tables > kit.M_MAX:
        raise ValueError("rule chose more tables than the kit hashes")
    counts = kit.merged(h, lsh.n_tables, EPS, P, "independent", rng)
    lsh_scores = h.score(lsh.n_tables, counts, lsh.scoring)
    g = grid_rule(d=d, expected_records=expected, cohort_size=P, epsilon=EPS)
    lo, hi = X.min(axis=0), X.max(axis=0)
    hi = np.where(hi > lo, hi, lo + 1.0)
    proj = None if g.projection is None else derive_projection(
        seed.to_bytes(8, "little"), d, g.projection)
    spec = GridSpec(lo, hi, g.bins, None, proj)
    exact = spec.dense_counts(X)
    noisy = exact + kit.noise(rng, exact.size, 1.0 / EPS, P)
    grid_scores = GridKNN.from_counts(spec, noisy, k=g.k, max_depth=g.max_depth
                                      ).decision_function(X[rows])
    weights = public_weights({
        "lsh": DetectorPlan.lsh(Decimal(str(EPS)), P, expected, lsh.n_tables, lsh.sample_size),
        "grid": DetectorPlan.grid(Decimal(str(EPS)), P, expected, spec.n_cells, sparse=False)})
    combined, _ = combine({"lsh": lsh_scores, "grid": grid_scores}, weights)
    ye = y[rows]
    return {"lsh": kit.auc(ye, lsh_scores), "grid": kit.auc(ye, grid_scores),
            "combined": kit.auc(ye, combined), "w_grid": weights["grid"]}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+",
                        default=sorted(p.stem for p in DATA.glob("*.npz")))
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args(argv)
    print("| dataset | n | d | LSH (rule) | grid (rule) | combined | grid weight | best single"
          " | combined - best |")
    print("|---|---|---|---|---|---|---|---|---|")
    bad = []
    for name in args.datasets:
        X, y = kit.load(DATA / f"{name}.npz")
        res = [run(X, y, seed) for seed in range(args.seeds)]
        mean = {k: float(np.mean([r[k] for r in res])) for k in res[0]}
        best = max(mean["lsh"], mean["grid"])
        diff = mean["combined"] - best
        if diff < -0.5:
            bad.append(name)
        print(f"| {name} | {len(X)} | {X.shape[1]} | {mean['lsh']:.1f} | {mean['grid']:.1f} | "
              f"{mean['combined']:.1f} | {mean['w_grid']:.3f} | {best:.1f} | {diff:+.1f} |",
              flush=True)
    print(f"\nCombined below the best single detector minus 0.5 on: {', '.join(bad) or 'none'}.")


if __name__ == "__main__":
    main()
