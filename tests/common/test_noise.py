"""Statistical tests of the exact Pólya noise shares against the exact distributions."""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from common.noise import noise_parameters, sample_noise_share
from common.noise.polya import sample_geometric, thin_cycles

ALPHA = 1e-4  # a correct sampler fails a test with probability <= ALPHA


def dlap_pmf(q: float) -> Callable[[int], float]:
    return lambda k: (1 - q) / (1 + q) * q ** abs(k)


def nb_difference_pmf(r: float, q: float) -> Callable[[int], float]:
    """pmf of ``NB(r, q) - NB(r, q)`` (scipy's ``nbinom(n, p)`` has ``p = 1 - q``)."""
    support = np.arange(0, 2000)
    nb = stats.nbinom.pmf(support, r, 1 - q)
    return lambda k: float(np.sum(nb[: nb.size - abs(k)] * nb[abs(k):]))


def chi_square_pvalue(samples: np.ndarray, pmf: Callable[[int], float]) -> float:
    """Pearson chi-square of integer samples against ``pmf``; cells with expected count < 5
    are merged into the two tails."""
    n = samples.size
    lo, hi = int(samples.min()), int(samples.max())
    ks = range(min(lo, -200), max(hi, 200) + 1)
    probs = {k: pmf(k) for k in ks}
    centre = [k for k in ks if probs[k] * n >= 5]
    a, b = min(centre), max(centre)
    expected = [sum(p for k, p in probs.items() if k < a)]
    expected += [probs[k] for k in range(a, b + 1)]
    expected.append(max(0.0, 1.0 - sum(expected)))
    observed = [np.sum(samples < a)] + [np.sum(samples == k) for k in range(a, b + 1)]
    observed.append(np.sum(samples > b))
    exp = n * np.array(expected)
    obs = np.array(observed, dtype=float)
    keep = exp > 0
    if np.any(obs[~keep] > 0):
        return 0.0
    stat = float(np.sum((obs[keep] - exp[keep]) ** 2 / exp[keep]))
    return float(stats.chi2.sf(stat, int(keep.sum()) - 1))


def summed_shares(n: int, sensitivity: int, epsilon: str, h_min: int, parties: int) -> np.ndarray:
    """Sum of ``parties`` independent shares, each sized for ``h_min``."""
    return sum(
        (sample_noise_share(n, sensitivity, epsilon, h_min) for _ in range(parties)),
        start=np.zeros(n, dtype=np.int64),
    )


@pytest.mark.parametrize("h", [1, 3, 7])
def test_sum_of_h_shares_is_discrete_laplace(h: int) -> None:
    sensitivity, epsilon = 2, "1"
    total = summed_shares(20_000, sensitivity, epsilon, h, h)
    assert chi_square_pvalue(total, dlap_pmf(math.exp(-0.5))) > ALPHA


@pytest.mark.parametrize("sized_for", [4, 8])
def test_mis_sized_shares_are_caught(sized_for: int) -> None:
    """Three shares sized for more parties than are summed carry too little noise."""
    total = summed_shares(20_000, 2, "1", sized_for, 3)
    assert chi_square_pvalue(total, dlap_pmf(math.exp(-0.5))) < 1e-6


def test_more_shares_than_h_min_is_more_noise() -> None:
    total = summed_shares(20_000, 2, "1", 3, 6)  # NB(2) - NB(2): variance doubles
    q = math.exp(-0.5)
    assert chi_square_pvalue(total, nb_difference_pmf(2.0, q)) > ALPHA
    assert np.var(total) > 1.5 * 2 * q / (1 - q) ** 2


@pytest.mark.parametrize(("h", "epsilon", "sensitivity"), [(2, "1", 2), (5, "0.3", 1)])
def test_single_share_is_nb_difference(h: int, epsilon: str, sensitivity: int) -> None:
    share = sample_noise_share(20_000, sensitivity, epsilon, h)
    q = math.exp(-float(epsilon) / sensitivity)
    assert chi_square_pvalue(share, nb_difference_pmf(1 / h, q)) > ALPHA
    # and it is not the full discrete Laplace (the test has power)
    assert chi_square_pvalue(share, dlap_pmf(q)) < 1e-6


def test_geometric_and_thinning_exact_moments() -> None:
    """``floor(X/n)`` with non-unit numerator, and thinning by a rational other than 1/h."""
    q = math.exp(-3 / 2)
    g = np.array([sample_geometric(3, 2) for _ in range(20_000)])
    assert chi_square_pvalue(g, lambda k: (1 - q) * q**k if k >= 0 else 0.0) > ALPHA
    kept = np.array([thin_cycles(20, 2, 3) for _ in range(20_000)])
    # the kept length of a thinned uniform permutation: P(kept = 0) = prod (1 - r/(j)) ...
    expected_zero = math.prod(1 - Fraction(2, 3) / j for j in range(1, 21))
    assert abs(np.mean(kept == 0) - float(expected_zero)) < 5 * math.sqrt(0.25 / 20_000)
    assert abs(np.mean(kept) - 20 * 2 / 3) < 5 * np.std(kept) / math.sqrt(20_000)


def empirical_epsilon(a: np.ndarray, b: np.ndarray, alpha: float) -> float:
    """Lower confidence bound on ``max_S ln(P(A in S) / P(B in S))`` over threshold events
    ``S = {T >= t}`` and ``{T <= t}`` of the statistic ``T`` (both directions).
    Clopper-Pearson bounds, Bonferroni over the events: a mechanism that is epsilon-DP
    yields a value <= epsilon with probability >= 1 - alpha."""
    lo, hi = np.percentile(np.concatenate([a, b]), [0.5, 99.5])
    thresholds = np.unique(np.linspace(lo, hi, 41).round())
    events = [(x >= t, y >= t) for t in thresholds for x, y in ((a, b), (b, a))]
    events += [(x <= t, y <= t) for t in thresholds for x, y in ((a, b), (b, a))]
    level = alpha / (2 * len(events))
    n = a.size
    kx = np.array([int(x.sum()) for x, _ in events])
    ky = np.array([int(y.sum()) for _, y in events])
    seen = kx > 0
    px_lo = stats.beta.ppf(level, kx[seen], n - kx[seen] + 1)
    py_hi = np.where(ky[seen] == n, 1.0,
                     stats.beta.ppf(1 - level, ky[seen] + 1, np.maximum(n - ky[seen], 1)))
    return float(np.max(np.log(px_lo / py_hi)))


def distributed_release(counts: np.ndarray, draws: int, epsilon: str, h_min: int,
                        parties: int) -> np.ndarray:
    """``draws`` releases of ``counts`` + the sum of ``parties`` shares (sensitivity = m)."""
    m = counts.size
    noise = summed_shares(draws * m, m, epsilon, h_min, parties).reshape(draws, m)
    return np.asarray(counts[None, :] + noise, dtype=np.int64)


@pytest.mark.slow
def test_distributed_release_on_neighbouring_datasets() -> None:
    """m tables, one record more in one cell of each: the sum of h shares meets epsilon,
    and the same test catches shares sized for twice the epsilon (half the noise).

    Statistics of a release ``x``: the sum, min and max over cells of ``x - d0``; the
    event ``min >= 1`` (every cell on the far side) attains the full loss ``epsilon``."""
    h, draws = 3, 30_000
    d0 = np.array([5, 0, 12], dtype=np.int64)
    d1 = d0 + 1  # the neighbour's extra record, counted once in every table
    eps = 1.0

    def loss(epsilon: str) -> float:
        r0, r1 = (distributed_release(d, draws, epsilon, h, h) - d0 for d in (d0, d1))
        return max(empirical_epsilon(f(r0, axis=1), f(r1, axis=1), ALPHA / 3)
                   for f in (np.sum, np.min, np.max))

    honest = loss("1")
    assert honest <= eps
    assert honest > 0.7 * eps  # the test is not blind: it sees most of the loss
    assert loss("2") > eps


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((3, 1, "0", 2), "epsilon"),
        ((3, 1, "-1", 2), "epsilon"),
        ((3, 1, "NaN", 2), "epsilon"),
        ((3, 1, 0.5, 2), "float"),
        ((3, 0, "1", 2), "sensitivity"),
        ((3, 1, "1", 0), "h_min"),
        ((-1, 1, "1", 2), "n_cells"),
    ],
)
def test_bad_arguments(args: tuple[int, int, object, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sample_noise_share(*args)  # type: ignore[arg-type]


def test_shapes_and_exact_parameters() -> None:
    out = sample_noise_share(5, 100, Decimal("0.1"), 10)
    assert out.shape == (5,) and out.dtype == np.int64
    assert sample_noise_share(0, 1, "1", 1).shape == (0,)
    assert noise_parameters(100, "0.3") == (3, 1000)
    assert noise_parameters(4, Decimal("0.25")) == (1, 16)


def test_forked_child_does_not_reuse_the_parents_random_words() -> None:
    """The word pool is emptied in a forked child: parent and child draw different noise."""
    import os

    from common.noise.polya import _POOL

    _POOL.word()  # the parent's pool now holds buffered words
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read)
        os.write(write, b"".join(_POOL.word().to_bytes(8, "little") for _ in range(8)))
        os._exit(0)
    os.close(write)
    child = b""
    while len(child) < 64:
        chunk = os.read(read, 64)
        if not chunk:
            break
        child += chunk
    os.close(read)
    os.waitpid(pid, 0)
    parent = b"".join(_POOL.word().to_bytes(8, "little") for _ in range(8))
    assert len(child) == 64 and child != parent
