"""DP releases: what is counted, what is noised, and that the noise has the stated scale."""

from __future__ import annotations

import dataclasses
import math
from decimal import Decimal
from typing import Any

import numpy as np
import pytest
from scipy import stats

from common.budget import PrivacyBudget
from common.histograms import release as rel
from common.histograms.grid import GridSpec
from common.histograms.hashing import derive_lsh_family
from common.histograms.release import Release, release_grid, release_lsh
from common.noise.laplace import make_count_noise, make_threshold_noise, threshold_delta
from common.wire.encoding import decode_counts, encode_release

ALPHA = 1e-4
"""Significance of the calibration tests: a correct sampler fails once in 10 000 runs."""
RNG = np.random.default_rng(7)  # data only; never privacy noise
X = RNG.uniform(0, 1, size=(500, 3))
FAMILY = derive_lsh_family(b"\x01" * 32, [0, 0, 0], [1, 1, 1], n_tables=10, sample_size=64)


@dataclasses.dataclass
class ZeroFamily:
    """Stand-in LSH family whose histogram is all zeros: the release is pure noise."""

    n_tables: int
    n_cells: int

    def histogram(self, X: Any) -> np.ndarray:
        return np.zeros(self.n_cells, dtype=np.int64)


def abs_geometric_pmf(scale: float, k_max: int) -> np.ndarray:
    """P(|Z| = k) for k < k_max and the tail P(|Z| >= k_max), Z discrete Laplace(scale)."""
    p = math.exp(-1 / scale)
    k = np.arange(k_max)
    pmf = np.where(k == 0, (1 - p) / (1 + p), 2 * (1 - p) * p**k / (1 + p))
    return np.append(pmf, 2 * p**k_max / (1 + p))


def chi2_pvalue(noise: np.ndarray, scale: float) -> float:
    k_max = int(scale * 6)
    expected = abs_geometric_pmf(scale, k_max) * noise.size
    observed = np.bincount(np.minimum(np.abs(noise), k_max), minlength=k_max + 1)
    return float(stats.chisquare(observed, expected).pvalue)


@pytest.fixture(scope="module")
def zero_release() -> Release:
    return release_lsh(ZeroFamily(n_tables=5, n_cells=20_000), None, 1)  # type: ignore[arg-type]


def test_noise_matches_discrete_laplace(zero_release: Release) -> None:
    noise, scale = zero_release.values, 5.0
    assert chi2_pvalue(noise, scale) > ALPHA
    p = math.exp(-1 / scale)
    variance = 2 * p / (1 - p) ** 2
    assert abs(noise.var() / variance - 1) < 0.1
    assert abs(noise.mean()) < 6 * math.sqrt(variance / noise.size)


@pytest.mark.parametrize("wrong_scale", [2.5, 10.0])
def test_wrong_scale_is_rejected(zero_release: Release, wrong_scale: float) -> None:
    assert chi2_pvalue(zero_release.values, wrong_scale) < ALPHA


def test_release_lsh_counts_all_records(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def spy(counts: np.ndarray, sensitivity: int, epsilon: Decimal) -> np.ndarray:
        seen.update(counts=counts.copy(), sensitivity=sensitivity, epsilon=epsilon)
        return counts + 1

    monkeypatch.setattr(rel, "add_discrete_laplace", spy)
    out = release_lsh(FAMILY, X, "0.5")
    np.testing.assert_array_equal(seen["counts"], FAMILY.histogram(X))
    assert seen["sensitivity"] == 10 and seen["epsilon"] == Decimal("0.5")
    assert seen["counts"].sum() == 10 * len(X)
    assert (out.kind, out.layout, out.n_cells) == ("lsh", "dense", FAMILY.n_cells)
    assert out.cost == PrivacyBudget("0.5") and out.indices is None


def test_release_is_immutable() -> None:
    out = release_lsh(FAMILY, X, 1)
    assert out.values.dtype == np.int64 and not out.values.flags.writeable
    with pytest.raises(ValueError):
        out.values[0] = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.cost = PrivacyBudget(0)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("epsilon", "exc"), [(0.5, TypeError), ("0", ValueError), ("-1", ValueError)]
)
def test_bad_epsilon(epsilon: Any, exc: type[Exception]) -> None:
    with pytest.raises(exc):
        release_lsh(FAMILY, X, epsilon)


def test_dense_grid_noises_empty_cells() -> None:
    spec = GridSpec([0, 0, 0], [1, 1, 1], bins=10)
    data = np.full((50, 3), 0.05)
    out = release_grid(spec, data, "0.5", 0, cell_limit=1000)
    assert (out.layout, out.values.size, out.cost) == ("dense", 1000, PrivacyBudget("0.5"))
    assert np.count_nonzero(out.values[1:]) > 500  # empty cells are noised
    with pytest.raises(ValueError, match="delta=0"):
        release_grid(spec, data, "0.5", "1e-6", cell_limit=1000)


def test_sparse_grid_thresholds() -> None:
    spec = GridSpec([0, 0, 0], [1, 1, 1], bins=10)
    data = np.vstack([np.full((1000, 3), 0.55), np.full((1, 3), 0.95)])
    out = release_grid(spec, data, "1", "1e-6", cell_limit=999)
    assert out.layout == "sparse" and out.cost == PrivacyBudget(1, "1e-6")
    assert out.indices is not None
    big = int(spec.cell_index(data[:1])[0])
    cells = out.indices[:, 0].tolist()
    assert big in cells and set(cells) <= set(spec.counts(data))
    assert abs(int(out.values[cells.index(big)]) - 1000) < 30
    idx, vals = decode_counts(encode_release(out), expected_cells=1000)
    assert idx is not None
    np.testing.assert_array_equal(idx, out.indices)
    np.testing.assert_array_equal(vals, out.values)
    with pytest.raises(ValueError, match="needs 0 < delta"):
        release_grid(spec, data, "1", 0, cell_limit=999)


@pytest.mark.parametrize(("epsilon", "delta"), [("1", "1e-6"), ("0.1", "1e-9"), ("5", "1e-3")])
def test_threshold_is_one_above_the_smallest_meeting_delta_by_the_map(
    epsilon: str, delta: str
) -> None:
    """OpenDP's map states P(Z >= T) but the mechanism's true delta is P(Z >= T - 1)
    (opendp#2922): the release threshold is one above the smallest T the map accepts."""
    import opendp.prelude as dp

    meas, threshold = make_threshold_noise(epsilon, delta)
    spent_eps, _ = meas.map((1, 1, 1))
    assert Decimal(spent_eps) <= Decimal(epsilon)

    def map_delta(t: int) -> float:
        m = dp.m.make_laplace_threshold(
            dp.map_domain(dp.atom_domain(T="String"), dp.atom_domain(T="i64")),
            dp.l01inf_distance(dp.absolute_distance(T="i64")), scale=1 / spent_eps, threshold=t)
        return float(m.map((1, 1, 1))[1])

    assert map_delta(threshold - 1) <= float(delta) < map_delta(threshold - 2)
    exact = threshold_delta(1 / spent_eps, threshold)
    assert exact <= Decimal(delta) < threshold_delta(1 / spent_eps, threshold - 1)
    # the exact formula at the release threshold equals the map one below it
    assert float(exact) == pytest.approx(map_delta(threshold - 1), rel=1e-9)


def test_release_validates_shape() -> None:
    with pytest.raises(ValueError, match="dense release needs"):
        Release("lsh", "dense", 3, np.zeros(2, np.int64), None, PrivacyBudget(1))
    with pytest.raises(ValueError, match="increasing"):
        Release("grid", "sparse", 3, np.zeros(2, np.int64), np.array([2, 1]), PrivacyBudget(1))


def test_release_from_accumulated_counts_checks_shape_and_carries_cost() -> None:
    from common.histograms.release import release_grid_counts, release_lsh_counts

    lsh = release_lsh_counts(np.zeros(40, dtype=np.int64), 10, "0.5")
    assert lsh.n_cells == 40 and lsh.cost == PrivacyBudget("0.5")
    with pytest.raises(ValueError, match="must have 8 cells"):
        release_grid_counts(np.zeros(7, dtype=np.int64), 8, "1")
    sparse = release_grid_counts((np.array([3, 5]), np.array([500, 1])), 10**12, "1", "1e-6")
    assert sparse.layout == "sparse" and sparse.cost == PrivacyBudget("1", "1e-6")
    assert 5 not in sparse.indices[:, 0].tolist()  # a single record is below the threshold


@pytest.mark.parametrize("epsilon", ["0.1", "0.3", "0.7", "1.1", "0.000000001", "3"])
@pytest.mark.parametrize("sensitivity", [1, 3, 100])
def test_count_noise_never_charges_less_than_the_map(epsilon: str, sensitivity: int) -> None:
    """The scale is rounded up, so OpenDP's map (rounded up itself) stays within epsilon
    exactly: no float slack between what is spent and what is charged."""
    meas = make_count_noise(sensitivity, epsilon)
    assert Decimal(meas.map(sensitivity)) <= Decimal(epsilon)
    assert Decimal(meas.map(sensitivity)) >= Decimal(epsilon) * (1 - Decimal("1e-12"))


@pytest.mark.parametrize("epsilon", ["0.1", "0.3", "1.1", "3"])
def test_threshold_noise_never_charges_less_than_the_map(epsilon: str) -> None:
    meas, _ = make_threshold_noise(epsilon, "1e-6")
    assert Decimal(meas.map((1, 1, 1))[0]) <= Decimal(epsilon)
