"""In-process federated LSH iTables for the rule benchmark (``bench_rules.py``).

The merged model a coordinator holds is the sum of the participants' exact histograms (the
histogram of all records) plus the noise the aggregation mode implies: independent, each of
the ``p`` releases carries its own discrete Laplace draw of scale ``m / epsilon`` per cell;
secure (``h_min = p``), the sum carries exactly one. So a participant split changes only
the number of draws, and one hash of all records serves every ``(epsilon, p, mode)``.

Benchmark-only fast sampler: the sum of ``k`` i.i.d. discrete Laplace draws of scale ``t``
is ``NB(k, q) - NB(k, q)`` with ``q = 1 - exp(-1/t)`` (a discrete Laplace is the difference
of two i.i.d. geometric failure counts), drawn with numpy's ``negative_binomial``: the same
distribution as ``k`` OpenDP draws (``common.noise.laplace``), not a privacy mechanism. It is
used here only, to keep thousands of simulated releases cheap.

Families of ``m`` tables are the first ``m`` tables of one ``m_max`` family derived by
``common.histograms.hashing.derive_lsh_family`` (tables are i.i.d. given the seed, so a prefix has
the distribution of a smaller family); each participant scores with the merged model
(``common.detectors.lsh_itables.cell_scores``, ``"mass"``), AUC over an evaluation
subsample of at most
``EVAL_ROWS`` records (every participant scores with the same merged model, so the pooled
AUC stands for the mean of theirs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from common.detectors.lsh_itables import Scoring, cell_scores
from common.histograms.hashing import LSHFamily, derive_lsh_family

EVAL_ROWS = 20_000
M_MAX = 100


def prefix(family: LSHFamily, m: int) -> LSHFamily:
    """The first ``m`` tables of ``family``."""
    return dataclasses.replace(family, features=family.features[:m], cuts=family.cuts[:m],
                               n_bits=family.n_bits[:m], offsets=family.offsets[:m + 1])


def noise(rng: np.random.Generator, size: int, scale: float, draws: int) -> NDArray[np.int64]:
    """Sum of ``draws`` i.i.d. discrete Laplace(scale) per cell (module docstring)."""
    q = -np.expm1(-1.0 / scale)
    a = rng.negative_binomial(draws, q, size)
    b = rng.negative_binomial(draws, q, size)
    return (a - b).astype(np.int64)


def auc(y: NDArray[np.int64], score: NDArray[np.float64]) -> float:
    """ROC AUC x 100 (ties averaged), higher score = more outlying."""
    from common.detectors.combine import average_ranks

    r = average_ranks(score)
    pos = int(y.sum())
    neg = y.size - pos
    return 100.0 * float((r[y == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))


@dataclasses.dataclass
class Hashed:
    """One family on one dataset: exact histogram of all rows, eval rows' flat indices."""

    family: LSHFamily
    hist: NDArray[np.int64]
    flat: NDArray[np.int32]  # (n_eval, M_MAX)

    def score(self, m: int, counts: NDArray[np.int64], scoring: Scoring
              ) -> NDArray[np.float64]:
        cells = cell_scores(prefix(self.family, m), counts, scoring)
        return -cells[self.flat[:, :m]].sum(axis=1)


def hashed(X: NDArray[np.float64], eval_rows: NDArray[np.int64], seed: int,
           sample_size: int) -> Hashed:
    lo, hi = X.min(axis=0), X.max(axis=0)
    hi = np.where(hi > lo, hi, lo + 1.0)
    fam = derive_lsh_family(seed.to_bytes(8, "little") + b"rules", lo, hi, M_MAX, sample_size)
    return Hashed(fam, fam.histogram(X), fam.flat_index(X[eval_rows]).astype(np.int32))


def merged(h: Hashed, m: int, epsilon: float, p: int, mode: str,
           rng: np.random.Generator) -> NDArray[np.int64]:
    """The coordinator's merged noisy counts of the first ``m`` tables (exact if
    ``epsilon <= 0``, the non-private reference)."""
    n_cells = int(h.family.offsets[m])
    exact = h.hist[:n_cells]
    if epsilon <= 0:
        return exact
    draws = p if mode == "independent" else 1
    return exact + noise(rng, n_cells, m / epsilon, draws)


def load(path: Path) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    arrays = np.load(path)
    return np.asarray(arrays["X"], dtype=np.float64), arrays["y"].astype(np.int64)


def mixture(n: int, d: int, clusters: int, kind: str, seed: int
            ) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """``n`` records in ``d`` dimensions: Gaussian clusters (unit sd, centres uniform in
    ``[-10, 10]^d``, unequal weights) and 2 % outliers of ``kind``: ``uniform`` over the
    inliers' box, ``local`` (a cluster's points scaled 4x from its centre) or ``clustered``
    (one tight cluster, sd 0.3, at a random point of the box)."""
    rng = np.random.default_rng(seed)
    n_out = max(2, n // 50)
    centres = rng.uniform(-10, 10, (clusters, d))
    weights = rng.dirichlet(np.full(clusters, 2.0))
    which = rng.choice(clusters, n - n_out, p=weights)
    inl = centres[which] + rng.normal(size=(n - n_out, d))
    lo, hi = inl.min(axis=0), inl.max(axis=0)
    if kind == "uniform":
        out = rng.uniform(lo, hi, (n_out, d))
    elif kind == "local":
        w = rng.choice(clusters, n_out, p=weights)
        direction = rng.normal(size=(n_out, d))
        direction /= np.linalg.norm(direction, axis=1, keepdims=True)
        out = centres[w] + direction * rng.uniform(3.0, 5.0, (n_out, 1)) * np.sqrt(d)
    elif kind == "clustered":
        out = rng.uniform(lo, hi, d) + 0.3 * rng.normal(size=(n_out, d))
    else:
        raise ValueError(kind)
    X = np.vstack([inl, out])
    y = np.r_[np.zeros(n - n_out, np.int64), np.ones(n_out, np.int64)]
    perm = rng.permutation(n)
    return X[perm], y[perm]


def eval_rows(n: int, seed: int) -> NDArray[np.int64]:
    rng = np.random.default_rng(seed)
    if n <= EVAL_ROWS:
        return np.arange(n)
    return np.sort(rng.choice(n, EVAL_ROWS, replace=False))


def conditions(epsilons: list[float], parts: list[int], modes: list[str]
               ) -> Iterator[tuple[float, int, str]]:
    for eps in epsilons:
        for p in parts:
            for mode in modes:
                yield eps, p, mode
