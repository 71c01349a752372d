"""Every released mechanism against neighbouring datasets, with a deliberately wrong twin.

Each mechanism is run through the project's own release function on many independent
records at once: the noise is drawn independently per cell by OpenDP, so a vector of ``N``
copies of the cells one record touches is ``N`` independent trials of that record's release
(batched draws instead of ``N`` calls). ``D`` lacks the record, ``D'`` has it. The same
procedure (:func:`conftest.check_dp`) must pass for the real mechanism and fail for a twin
that is wrong in one documented way (sensitivity ignored, scale off, threshold one too low).
The sensitivity each statistical test relies on (one record moves one cell per LSH table,
one grid cell) is checked on real data first.

For neighbouring datasets ``D`` and ``D'`` and any event ``S`` on the output, an
``(epsilon, delta)``-DP mechanism satisfies ``P[M(D) in S] <= e^epsilon P[M(D') in S] + delta``
in both directions. :func:`check_dp` estimates both probabilities from independent draws and
fails when the data prove a violation: the Clopper-Pearson lower bound of one side exceeds
``e^epsilon`` times the upper bound of the other plus ``delta`` (each bound at confidence
``1 - 1e-6``, so a correct mechanism fails by chance about once in a million runs). The
events the tests use are the worst-case ones for discrete Laplace (the likelihood ratio is
``e^epsilon`` on them exactly), so a mechanism that spends more than it charges is caught.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import numpy as np
import opendp.prelude as dp
import pytest
from numpy.typing import NDArray
from scipy import stats

from common.histograms import release as rel
from common.histograms.cellkeys import ints_from_keys, keys_from_ints
from common.histograms.grid import GridSpec
from common.histograms.hashing import derive_lsh_family
from common.histograms.release import Release, release_grid_counts, release_lsh_counts
from common.noise.laplace import threshold_delta

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets" / "breastw.npz"
EPS = "1"
ALPHA = 1e-6

def bounds(hits: int, n: int, alpha: float = ALPHA) -> tuple[float, float]:
    """Two one-sided Clopper-Pearson bounds of a binomial proportion, each at ``1 - alpha``."""
    lo = 0.0 if hits == 0 else float(stats.beta.ppf(alpha, hits, n - hits + 1))
    hi = 1.0 if hits == n else float(stats.beta.ppf(1 - alpha, hits + 1, n - hits))
    return lo, hi


def check_dp(in_d: NDArray[np.bool_], in_d2: NDArray[np.bool_], epsilon: Decimal | str,
             delta: Decimal | str = "0") -> None:
    """Assert that event frequencies under ``D`` and ``D'`` do not prove a DP violation."""
    factor, dlt = float(np.exp(float(epsilon))), float(delta)
    a, b = bounds(int(in_d.sum()), in_d.size), bounds(int(in_d2.sum()), in_d2.size)
    assert a[0] <= factor * b[1] + dlt, f"P_D >= {a[0]:.5f} > e^eps * {b[1]:.5f} + {dlt}"
    assert b[0] <= factor * a[1] + dlt, f"P_D' >= {b[0]:.5f} > e^eps * {a[1]:.5f} + {dlt}"


N = 40_000
Events = list[Callable[[NDArray[np.int64]], NDArray[np.bool_]]]


def run(check: Callable[[], None], correct: bool) -> None:
    if correct:
        check()
    else:
        with pytest.raises(AssertionError):
            check()


@pytest.fixture(scope="module")
def real_data() -> NDArray[np.float64]:
    if not DATA.exists():
        pytest.skip(f"{DATA} is absent")
    return np.asarray(np.load(DATA)["X"], dtype=np.float64)


def test_one_record_moves_one_cell_per_table_and_one_grid_cell(
    real_data: NDArray[np.float64]) -> None:
    """The sensitivities the mechanisms are calibrated to, for 40 real records."""
    lo, hi = real_data.min(axis=0) - 1, real_data.max(axis=0) + 1  # stand-in public bounds
    family = derive_lsh_family(b"\x01" * 32, lo, hi, 20, 64)
    dense, wide = GridSpec(lo, hi, bins=3), GridSpec(np.r_[lo, lo] - 1, np.r_[hi, hi], bins=4)
    full_lsh, full_grid = family.histogram(real_data), dense.dense_counts(real_data)
    full_wide = wide.counts(np.hstack([real_data, real_data]))
    for i in range(40):
        rest = np.delete(real_data, i, axis=0)
        diff = full_lsh - family.histogram(rest)
        assert diff.min() == 0 and diff.sum() == family.n_tables
        assert all(diff[a:b].sum() == 1 for a, b in
                   zip(family.offsets[:-1], family.offsets[1:], strict=True))
        assert np.abs(full_grid - dense.dense_counts(rest)).sum() == 1
        rest_wide = wide.counts(np.hstack([rest, rest]))
        changed = {c: full_wide[c] - rest_wide.get(c, 0) for c in full_wide}
        assert sorted(v for v in changed.values() if v) == [1]


def test_release_functions_use_the_stated_sensitivity(
    real_data: NDArray[np.float64], monkeypatch: pytest.MonkeyPatch
) -> None:
    """release_lsh/release_grid reach the noise with sensitivity m and 1 (what is tested)."""
    seen: list[int] = []
    real = rel.add_discrete_laplace

    def spy(counts: NDArray[np.int64], sensitivity: int, epsilon: Decimal) -> NDArray[np.int64]:
        seen.append(sensitivity)
        return real(counts, sensitivity, epsilon)

    monkeypatch.setattr(rel, "add_discrete_laplace", spy)
    lo, hi = real_data.min(axis=0), real_data.max(axis=0)
    rel.release_lsh(derive_lsh_family(b"\x02" * 32, lo, hi, 7, 64), real_data, EPS)
    rel.release_grid(GridSpec(lo, hi, bins=2), real_data, EPS, 0, cell_limit=1000)
    assert seen == [7, 1]


M = 4  # tables: one record changes one cell in each
N_LSH = 20_000


def lsh_right(counts: NDArray[np.int64]) -> Release:
    return release_lsh_counts(counts, M, EPS)


def lsh_sensitivity_ignored(counts: NDArray[np.int64]) -> Release:
    return release_lsh_counts(counts, 1, EPS)


@pytest.mark.parametrize(("release", "correct"),
                         [(lsh_right, True), (lsh_sensitivity_ignored, False)])
def test_lsh_release(release: Callable[[NDArray[np.int64]], Release], correct: bool) -> None:
    """Groups of M cells are one record's cells in the M tables; worst-case events: all M
    noisy counts at or above the record's count, or all below it."""
    base = np.full(N_LSH * M, 3, dtype=np.int64)
    d = release(base).values.reshape(N_LSH, M)
    d2 = release(base + 1).values.reshape(N_LSH, M)
    events: Events = [lambda v: (v >= 4).all(axis=1), lambda v: (v <= 3).all(axis=1)]
    run(lambda: [check_dp(e(d), e(d2), EPS) for e in events], correct)


def dense_right(counts: NDArray[np.int64]) -> Release:
    return release_grid_counts(counts, counts.size, EPS)


def dense_scale_halved(counts: NDArray[np.int64]) -> Release:
    return release_grid_counts(counts, counts.size, Decimal(EPS) * 2)  # but EPS is charged


@pytest.mark.parametrize(("release", "correct"),
                         [(dense_right, True), (dense_scale_halved, False)])
def test_dense_grid_release(release: Callable[[NDArray[np.int64]], Release], correct: bool) -> None:
    d = release(np.zeros(N, dtype=np.int64)).values
    d2 = release(np.ones(N, dtype=np.int64)).values
    events: Events = [lambda v: v >= 1, lambda v: v <= 0]
    run(lambda: [check_dp(e(d), e(d2), EPS) for e in events], correct)


WIDE_CELLS = 4**64
DELTA = "0.005"
SPARSE_N = 100_000


def spread_keys(n: int) -> NDArray[np.int64]:
    return keys_from_ints(range(0, WIDE_CELLS, WIDE_CELLS // n), 3)[:n]


@pytest.fixture
def threshold_one_too_low(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pre-fix mechanism: OpenDP's threshold taken at face value (opendp#2922)."""
    real = rel.make_threshold_noise

    def wrong(epsilon: Decimal, delta: Decimal) -> tuple[dp.Measurement, int]:
        meas, threshold = real(epsilon, delta)
        scale = 1 / float(Decimal(epsilon))
        return dp.m.make_laplace_threshold(meas.input_domain, meas.input_metric, scale=scale,
                                           threshold=threshold - 1), threshold - 1

    monkeypatch.setattr(rel, "make_threshold_noise", wrong)


def released_share(counts: int, n: int) -> tuple[NDArray[np.bool_], Release]:
    keys = spread_keys(n)
    out = release_grid_counts((keys, np.full(n, counts)), WIDE_CELLS, EPS, DELTA)
    assert out.indices is not None
    position = {k: i for i, k in enumerate(ints_from_keys(keys))}
    hit = np.zeros(n, dtype=bool)
    hit[[position[k] for k in ints_from_keys(out.indices)]] = True
    return hit, out


@pytest.mark.parametrize("correct", [True, False])
def test_sparse_grid_isolated_record(correct: bool, request: pytest.FixtureRequest) -> None:
    """A cell holding one isolated record is absent without it, so its release probability
    is the delta actually spent: it must not exceed the delta charged."""
    if not correct:
        request.getfixturevalue("threshold_one_too_low")
    hit, _ = released_share(1, SPARSE_N)
    absent = np.zeros(SPARSE_N, dtype=bool)  # without the record the cell is never released
    run(lambda: check_dp(absent, hit, EPS, DELTA), correct)
    if correct:  # and the exact formula at the release threshold is the probability seen
        _, threshold = rel.make_threshold_noise(EPS, DELTA)
        lo, hi = bounds(int(hit.sum()), SPARSE_N)
        assert lo <= float(threshold_delta(1.0, threshold)) <= hi


def sparse_scale_halved(monkeypatch: pytest.MonkeyPatch) -> None:
    real = rel.make_threshold_noise
    monkeypatch.setattr(rel, "make_threshold_noise", lambda e, d: real(Decimal(e) * 2, d))


@pytest.mark.parametrize("correct", [True, False])
def test_sparse_grid_occupied_cell(correct: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cell present in both datasets (40 vs 41 records): the epsilon part."""
    if not correct:
        sparse_scale_halved(monkeypatch)
    d, out = released_share(40, N)
    d2, out2 = released_share(41, N)
    assert d.all() and d2.all()  # far above the threshold
    events: Events = [lambda v: v >= 41, lambda v: v <= 40]
    run(lambda: [check_dp(e(out.values), e(out2.values), EPS) for e in events], correct)
