"""Grids with more cells than 64 bits can number: wide keys end to end, config checks,
projections, and records in the extreme cells."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from common.detectors.grid_knn import GridKNN
from common.detectors.grid_scores import knn_grid_scores
from common.histograms.cellkeys import (
    MAX_KEY_BITS,
    ints_from_keys,
    key_strings,
    key_words,
    keys_from_ints,
    keys_from_strings,
    keys_problem,
    union_keys,
)
from common.histograms.grid import GridSpec, derive_projection
from common.histograms.hashing import derive_lsh_family
from common.histograms.merge import merge_sparse
from common.histograms.release import release_grid, release_lsh
from common.study.config import (
    FeatureSpec,
    GridParams,
    PrivacyParams,
    StudyConfig,
    new_study_config,
)
from common.wire.encoding import decode_counts, encode_release

SEED = bytes(range(32))


def study(n_features: int, bins: int, **grid: Any) -> StudyConfig:
    features = [FeatureSpec(name=f"f{i}", lo=0.0, hi=1.0) for i in range(n_features)]
    return new_study_config(
        "wide", features, seed=SEED, n_tables=4, sample_size=16,
        grid=GridParams(bins=bins, **grid),
        privacy=PrivacyParams(epsilon_lsh="1", epsilon_grid="1", delta_grid="1e-6"),
    )


@pytest.mark.parametrize(
    ("n_cells", "words"),
    [(1, 1), (2**31 + 1, 1), (2**63, 1), (2**63 + 1, 2), (2**126 + 1, 3), (4**784, 25)],
)
def test_key_words(n_cells: int, words: int) -> None:
    assert key_words(n_cells) == words


@given(st.lists(st.integers(0, 2**300 - 1), unique=True, max_size=30))
def test_keys_order_and_round_trip(values: list[int]) -> None:
    words = key_words(2**300)
    keys = keys_from_ints(sorted(values), words)
    assert ints_from_keys(keys) == sorted(values)
    assert keys_problem(keys, 2**300) is None
    assert ints_from_keys(keys_from_strings(sorted(key_strings(keys)), words)) == sorted(values)
    if len(values) > 1:
        assert keys_problem(keys[::-1], 2**300) is not None


def test_keys_problems_and_union() -> None:
    keys = keys_from_ints([5, 2**70], 2)
    assert keys_problem(keys, 2**70) is not None  # 2**70 is not below n_cells
    assert keys_problem(keys, 2**70 + 1) is None
    assert keys_problem(keys, 2**40) is not None  # wrong width
    union, pa, pb = union_keys(keys, keys_from_ints([7, 2**70], 2))
    assert ints_from_keys(union) == [5, 7, 2**70]
    assert pa.tolist() == [0, 2] and pb.tolist() == [1, 2]
    with pytest.raises(ValueError, match="8064"):
        key_words(2 ** (MAX_KEY_BITS + 1))


def test_config_accepts_64_features_and_refuses_keys_that_do_not_fit() -> None:
    wide = study(64, 4, cell_limit=1000)
    assert wide.grid_cells == 4**64 and wide.grid_layout == "sparse"
    spec = wide.grid_spec()
    assert spec is not None and spec.key_words == 3
    with pytest.raises(ValidationError, match="8064"):
        study(807, 1024)  # 807 * 10 bits
    assert study(806, 1024).grid_cells == 1024**806


def test_projection_comes_from_the_public_seed() -> None:
    cfg = study(100, 4, projection=8, cell_limit=10)
    spec = cfg.grid_spec()
    assert spec is not None and spec.n_dims == 8 and cfg.grid_cells == 4**8
    assert spec.projection is not None
    np.testing.assert_array_equal(spec.projection, derive_projection(SEED, 100, 8))
    np.testing.assert_array_equal(np.abs(spec.projection), 0.1)
    assert not np.array_equal(derive_projection(SEED, 100, 8),
                              derive_projection(bytes(32), 100, 8))
    sub = study(10, 4, projection=3, features=["f1", "f4"], cell_limit=10).grid_spec()
    assert sub is not None and sub.projection is not None and sub.projection.shape == (3, 2)


@pytest.mark.parametrize(("n_features", "bins"), [(16, 4), (31, 4), (32, 4), (33, 4),
                                                    (64, 4), (200, 1024)])
def test_records_in_extreme_cells_are_released(n_features: int, bins: int) -> None:
    """Records in the first, last and other far cells: the release, its wire form and the
    merge never fail because of where the records lie (no data-dependent crash)."""
    cfg = study(n_features, bins, cell_limit=1000)
    spec = cfg.grid_spec()
    assert spec is not None
    corners = np.array([np.zeros(n_features), np.ones(n_features),
                        np.r_[1.0, np.zeros(n_features - 1)],   # index bins**(d-1) (bins - 1)
                        np.r_[np.zeros(n_features - 1), 1.0],   # index bins - 1
                        np.r_[np.zeros(n_features // 2), np.ones(n_features - n_features // 2)]])
    X = np.repeat(corners, 200, axis=0)
    expected = sorted(spec.counts(X))
    assert expected[-1] == cfg.grid_cells - 1 and expected[0] == 0
    p = cfg.privacy
    out = release_grid(spec, X, p.epsilon_grid, p.delta_grid, cfg.grid.cell_limit)  # type: ignore[union-attr]
    assert out.indices is not None and ints_from_keys(out.indices) == expected
    keys, values = decode_counts(encode_release(out), expected_cells=cfg.grid_cells)
    assert keys is not None and ints_from_keys(keys) == expected
    merged_keys, merged = merge_sparse(keys, values, keys[:2], values[:2])
    np.testing.assert_array_equal(merged_keys, keys)
    np.testing.assert_array_equal(merged[:2], 2 * values[:2])
    det = GridKNN.from_counts(spec, (keys, values), k=5, max_depth=2)
    scores = det.decision_function(np.vstack([corners, np.full((1, n_features), 0.3)]))
    assert scores[:5].max() == 0 and scores[5] > 0


def test_empty_data_releases_noise_only() -> None:
    spec = GridSpec(np.zeros(40), np.ones(40), bins=4)
    empty = np.zeros((0, 40))
    out = release_grid(spec, empty, "1", "1e-6", cell_limit=1000)
    assert out.indices is not None and out.indices.shape == (0, 2) and out.values.size == 0
    dense = release_grid(GridSpec(np.zeros(2), np.ones(2), bins=4), np.zeros((0, 2)), "1", 0,
                         cell_limit=1000)
    assert dense.values.shape == (16,)
    family = derive_lsh_family(SEED, np.zeros(3), np.ones(3), 5, 16)
    lsh = release_lsh(family, np.zeros((0, 3)), "1")
    assert lsh.values.shape == (family.n_cells,) and np.count_nonzero(lsh.values) > 0


def test_grid_knn_defaults_work_on_64_features() -> None:
    rng = np.random.default_rng(0)
    X = rng.random((300, 64))
    X[:30] = 0.5 + 0.02 * rng.random((30, 64))  # a tight cluster
    det = GridKNN(bins=4, k=10, projection=None).fit(X)
    assert det.spec_.n_cells == 4**64 and det.cells_.shape[1] == 3
    scores = det.decision_function(X)
    assert scores[:30].mean() < scores[30:].mean()


def test_private_grid_knn_releases_a_large_grid_sparsely() -> None:
    rng = np.random.default_rng(1)
    X = np.vstack([np.full((200, 40), 0.1), rng.random((20, 40))])
    with pytest.raises(ValueError, match="needs delta"):
        GridKNN(bins=4, k=10, projection=None, lo=np.zeros(40), hi=np.ones(40),
                epsilon=1).fit(X)
    det = GridKNN(bins=4, k=10, projection=None, lo=np.zeros(40), hi=np.ones(40), epsilon=1,
                  delta="1e-6").fit(X)
    assert det.cells_.shape == (1, 2)  # only the crowded cell passes the threshold
    assert abs(int(det.cell_counts_[0]) - 200) < 40


def test_scan_scores_match_brute_force_in_many_dimensions() -> None:
    """The matrix-product distance path (many dims) gives Algorithm 1's exact scores."""
    rng = np.random.default_rng(2)
    cells = np.unique(rng.integers(0, 5, size=(400, 30)), axis=0)
    counts = rng.integers(1, 4, size=cells.shape[0])
    query = np.vstack([cells[:20], rng.integers(0, 5, size=(20, 30))])
    dist = np.abs(query[:, None, :] - cells[None, :, :]).sum(axis=2)
    for weighted in (False, True):
        got = knn_grid_scores(query, cells, counts, k=4, max_depth=40, weighted=weighted, bins=5)
        for q in range(query.shape[0]):
            order = np.argsort(dist[q], kind="stable")
            d, c = dist[q][order], counts[order]
            reach = int(np.searchsorted(np.cumsum(c), 4))  # first cell covering k records
            if weighted:
                taken = np.minimum(c, np.maximum(4 - (np.cumsum(c) - c), 0))
                assert got[q] == pytest.approx((taken * d).sum() / 4)
            else:
                assert got[q] == d[reach]


def test_grid_knn_projection_depends_on_the_seed_only() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.random((50, 20)), rng.random((80, 20)) * 3
    lo, hi = np.zeros(20), np.full(20, 3.0)
    one = GridKNN(projection=4, seed=SEED, lo=lo, hi=hi).fit(a)
    two = GridKNN(projection=4, seed=SEED.hex(), lo=lo, hi=hi).fit(b)
    assert one.spec_.projection is not None and two.spec_.projection is not None
    np.testing.assert_array_equal(one.spec_.projection, two.spec_.projection)
    np.testing.assert_array_equal(one.spec_.projection, derive_projection(SEED, 20, 4))
    other = GridKNN(projection=4, lo=lo, hi=hi, random_state=1).fit(a)
    assert not np.array_equal(other.spec_.projection, one.spec_.projection)
    assert one.spec_.n_cells == one.spec_.bins**4 and one.decision_function(b).shape == (80,)


def test_projection_is_signed_and_absent_from_older_payloads() -> None:
    from common.study.config import canonical_json
    from common.study.signing import generate_key, sign_config, verify_config

    key = generate_key()
    plain = study(5, 4, cell_limit=10)
    assert b"projection" not in canonical_json(plain)  # configs signed before keep their bytes
    projected = study(100, 4, projection=8, cell_limit=10)
    signed = sign_config(projected, key)
    assert '"projection":8' in signed.payload
    now = projected.issued_at
    back = verify_config(signed, key.public_key(), now=now)
    assert back.grid is not None and back.grid.projection == 8
    tampered = signed.model_copy(update={"payload": signed.payload.replace(
        '"projection":8', '"projection":9')})
    with pytest.raises(Exception, match="signature"):
        verify_config(tampered, key.public_key(), now=now)
