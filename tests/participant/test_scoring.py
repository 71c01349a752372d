"""Combining detector scores, flagging and writing scored output."""

from __future__ import annotations

import numpy as np
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from participant.data.reader import DataSource, DataSpec
from participant.scoring.score import average_ranks, combine, flag_count, score_source


class SumDetector:
    def decision_function(self, X):
        return X.sum(axis=1)


class FirstDetector:
    def decision_function(self, X):
        return X[:, 0] * 100


@pytest.mark.parametrize(
    ("n", "contamination", "top_k", "expected"),
    [
        (100, 0.05, None, 5),
        (101, 0.05, None, 6),
        (10, None, 3, 3),
        (2, None, 5, 2),
        (7, 0, None, 0),
    ],
)
def test_flag_count(n, contamination, top_k, expected):
    assert flag_count(n, contamination=contamination, top_k=top_k) == expected


def test_combine_is_mean_rank_percentile():
    combined, rank = combine({"a": np.array([1.0, 3.0, 2.0]), "b": np.array([30.0, 10.0, 20.0])})
    np.testing.assert_allclose(combined, [(1 / 3 + 1) / 2, (1 + 1 / 3) / 2, 2 / 3])
    assert sorted(rank.tolist()) == [1, 2, 3]


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_score_source_writes_keys_scores_rank_and_flags(tmp_path, suffix):
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 1, size=(1000, 2))
    X[17] = [9.5, 9.5]
    data = tmp_path / "d.csv"
    keys = [f"p{i}" for i in range(1000)]
    rows = "".join(f"{k},{a},{b}\n" for k, (a, b) in zip(keys, X, strict=True))
    data.write_text("pid,x,y\n" + rows)
    spec = DataSpec(("x", "y"), np.zeros(2), np.full(2, 10.0), id_column="pid")
    out = tmp_path / f"out{suffix}"
    detectors = {"sum": SumDetector(), "first": FirstDetector()}
    summary = score_source(DataSource(data, spec, chunk_rows=100), detectors, out, top_k=1)
    table = pq.read_table(out) if suffix == ".parquet" else pacsv.read_csv(out)
    assert table.column_names == [
        "pid", "score_sum", "score_first", "outlier_score", "rank", "outlier"
    ]
    assert table.column("pid").to_pylist() == keys
    assert table.column("outlier").to_pylist().index(True) == 17
    assert table.column("rank")[17].as_py() == 1
    assert summary.rows == 1000 and summary.flagged == 1


@settings(deadline=None)
@given(st.lists(st.integers(-3, 3) | st.floats(-1e6, 1e6), min_size=1, max_size=60))
def test_average_ranks_equal_scipy_rankdata(values):
    from scipy.stats import rankdata

    x = np.array(values, dtype=np.float64)
    np.testing.assert_array_equal(average_ranks(x), rankdata(x, method="average"))


def test_scoring_does_not_import_scipy():
    import subprocess
    import sys

    code = "import sys, participant.scoring.score; print('scipy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_score_source_weighs_the_combined_score(tmp_path):
    rng = np.random.default_rng(2)
    X = rng.uniform(0, 1, size=(300, 2))
    data = tmp_path / "d.csv"
    data.write_text("x,y\n" + "".join(f"{a},{b}\n" for a, b in X))
    spec = DataSpec(("x", "y"), np.zeros(2), np.ones(2))
    out = tmp_path / "out.parquet"
    detectors = {"sum": SumDetector(), "first": FirstDetector()}
    score_source(DataSource(data, spec), detectors, out, weights={"sum": 0.0, "first": 2.0})
    table = pq.read_table(out)
    assert table.column_names[1:3] == ["score_sum", "score_first"]  # columns unchanged
    np.testing.assert_allclose(table.column("outlier_score").to_numpy(),
                               average_ranks(X[:, 0] * 100) / 300)
