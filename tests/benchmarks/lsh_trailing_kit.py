"""Where LSH iTables trails IsolationForest: sections 1b and 1c of ``bench_detectors.py``.

1b runs both detectors on ten digit-against-the-rest tasks built from scikit-learn's
bundled 8x8 digits (no download); 1c measures, on the shared sets where LSH trails, what
was tried: an isolation-depth cell score and two cut placements (diagnostics that look at
the data, so not usable in a private study). docs/DETECTORS.md explains the results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from sklearn.ensemble import IsolationForest
from sklearn.metrics import roc_auc_score

from common.detectors import LSHiTables
from common.histograms.hashing import LSHFamily

Loader = Callable[[str], tuple[np.ndarray, np.ndarray]]


def digits_one_vs_rest(seeds: int) -> None:
    """scikit-learn's bundled 8x8 digits: digit k is the normal class, a seeded sample of the
    other digits (10 % of k's count) the outliers; LSH iTables and IsolationForest with the
    section's settings."""
    from sklearn.datasets import load_digits

    X_all, t = load_digits(return_X_y=True)
    print(f"### 1b. Digits, one against the rest ({seeds} seeds)\n")
    print("scikit-learn's bundled 8x8 digits (1797 x 64): for each digit k, its images are the"
          " normal class and a seeded sample of the other digits, 10 % of k's count, the"
          " outliers. Settings as in section 1.\n")
    print("| digit | n | LSHiTables AUC | IForest AUC | LSH - IF |")
    print("|---|---|---|---|---|")
    trailing = []
    gaps = []
    for k in range(10):
        inliers = np.flatnonzero(t == k)
        others = np.random.default_rng(k).choice(np.flatnonzero(t != k), len(inliers) // 10,
                                                 replace=False)
        X = X_all[np.concatenate([inliers, others])]
        y = np.r_[np.zeros(len(inliers), int), np.ones(len(others), int)]
        lsh = 100 * np.mean([roc_auc_score(y, LSHiTables(random_state=s).fit(X)
                                           .decision_function(X)) for s in range(seeds)])
        forest = 100 * np.mean([roc_auc_score(y, -IsolationForest(
            n_estimators=100, random_state=s, n_jobs=1).fit(X).score_samples(X))
            for s in range(seeds)])
        gaps.append(lsh - forest)
        flag = " **LSH < IF - 2**" if lsh < forest - 2 else ""
        if flag:
            trailing.append(f"{k} ({lsh:.1f} vs {forest:.1f})")
        print(f"| {k} | {len(X)} | {lsh:.1f}{flag} | {forest:.1f} | {lsh - forest:+.1f} |",
              flush=True)
    print(f"\nDigits where LSH iTables trails IsolationForest by more than 2 points:"
          f" {', '.join(trailing) or 'none'} (largest gap {min(gaps):+.1f}, mean"
          f" {np.mean(gaps):+.1f}).\n")


def _path_cell_scores(family: LSHFamily, counts: np.ndarray) -> np.ndarray:
    """Per-cell isolation depth (higher = more normal): the first prefix of a table's bits
    whose cell holds at most one record, else ``l + c(count)`` (IsolationForest's average
    path length of the records left). Bits are little-endian, so the cell of the first
    ``k`` bits is the cell index modulo ``2**k``."""
    out = np.empty(family.n_cells)
    for j in range(family.n_tables):
        bits, a, b = int(family.n_bits[j]), family.offsets[j], family.offsets[j + 1]
        cj = counts[a:b].astype(np.float64)
        big = cj > 1
        depth = np.full(cj.shape, float(bits))
        depth[big] += 2 * (np.log(cj[big] - 1) + np.euler_gamma) - 2 * (cj[big] - 1) / cj[big]
        for k in range(bits - 1, -1, -1):  # a coarser prefix that isolates wins
            prefix = cj.reshape(1 << (bits - k), 1 << k).sum(axis=0)
            depth = np.where(np.tile(prefix, 1 << (bits - k)) <= 1, float(k), depth)
        out[a:b] = depth
    return out


def trailing_probe(load: Loader, names: Sequence[str], seeds: int) -> None:
    """What was tried where LSH iTables trails IsolationForest (docs/DETECTORS.md)."""
    names = [n for n in ("thyroid_dedup", "thyroid") if n in names]
    if not names:
        return
    print(f"### 1c. Where LSH trails: scoring and cut placement tried ({seeds} seeds)\n")
    print("Same detector (m = 100, s = 1000). *path*: the paper's tables scored by an isolation"
          " depth per cell instead of the log count (the first prefix of a table's bits whose"
          " cell holds at most one sampled record, else bits + IsolationForest's c(count))."
          " *log1p features*: the detector on log1p(x - min x), so that the uniform cuts are"
          " uniform on a log scale (a diagnostic: the transform uses the data's minimum)."
          " *rank features*: on per-feature ranks / n, i.e. cuts at data quantiles"
          " (diagnostic).\n")
    print("| dataset | log (default) | path | log1p features | rank features | IForest |")
    print("|---|---|---|---|---|---|")
    from scipy.stats import rankdata

    for name in names:
        X, y = load(name)
        variants = {"log": X, "log1p": np.log1p(X - X.min(axis=0)),
                    "rank": np.column_stack([rankdata(c) / len(c) for c in X.T])}
        res: dict[str, list[float]] = {k: [] for k in ("log", "path", "log1p", "rank", "if")}
        for seed in range(seeds):
            for key, A in variants.items():
                det = LSHiTables(random_state=seed).fit(A)
                res[key].append(roc_auc_score(y, det.decision_function(A)))
                if key == "log":
                    det.cell_scores_ = _path_cell_scores(det.family_, det.histograms_)
                    res["path"].append(roc_auc_score(y, det.decision_function(A)))
            forest = IsolationForest(n_estimators=100, random_state=seed, n_jobs=1).fit(X)
            res["if"].append(roc_auc_score(y, -forest.score_samples(X)))
        cells = " | ".join(f"{100 * np.mean(res[k]):.1f}" for k in res)
        print(f"| {name} | {cells} |", flush=True)
    print()
