"""Score files with each record's released cohort: in process and per Dask partition."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from common.cohorts.model import CohortModel, Condition
from participant.data.reader import DataSource, DataSpec
from participant.scoring.cohorts import Cohorts
from participant.scoring.score import score_source

CENTRES = np.array([[1.0, 1.0], [9.0, 9.0]])
RULES = ((Condition(0, 5.0, False),), (Condition(0, 5.0, True),))


class SumDetector:
    def decision_function(self, X):
        return X.sum(axis=1)


@pytest.fixture
def data(tmp_path):
    X = np.array([[1.5, 1.0], [8.0, 9.5], [0.0, 0.0], [10.0, 10.0], [4.0, 4.0]])
    path = tmp_path / "d.csv"
    path.write_text("x,y\n" + "".join(f"{a},{b}\n" for a, b in X))
    return path, X, DataSpec(("x", "y"), np.zeros(2), np.full(2, 10.0))


@pytest.mark.parametrize("rules", [(), RULES])
def test_score_file_has_each_records_cohort_and_distance(tmp_path, data, rules):
    path, X, spec = data
    model = CohortModel(CENTRES, [30.0, 20.0], np.zeros(2), np.full(2, 10.0), rules)
    out = tmp_path / "scores.parquet"
    score_source(DataSource(path, spec, chunk_rows=2), {"sum": SumDetector()}, out,
                 cohorts=Cohorts(model, ["x", "y"]))
    table = pq.read_table(out).to_pydict()
    assert table["cohort"] == [0, 1, 0, 1, 0]
    unit = X / 10.0 - CENTRES[table["cohort"]] / 10.0
    np.testing.assert_allclose(table["cohort_distance"], np.sqrt((unit**2).sum(1)))
    if rules:
        assert table["cohort_rule"] == ["x < 5", "x >= 5", "x < 5", "x >= 5", "x < 5"]
    else:
        assert "cohort_rule" not in table


def test_without_a_cohort_model_the_file_is_unchanged(tmp_path, data):
    path, _, spec = data
    out = tmp_path / "scores.parquet"
    score_source(DataSource(path, spec), {"sum": SumDetector()}, out)
    assert not any(c.startswith("cohort") for c in pq.read_table(out).column_names)


def test_dask_partition_scores_carry_the_same_columns(data):
    pytest.importorskip("distributed")
    from participant.dask.engine import partition_scores

    path, _, spec = data
    model = CohortModel(CENTRES, [30.0, 20.0], np.zeros(2), np.full(2, 10.0), RULES)
    frame, _ = partition_scores(path, spec, 2, {"sum": SumDetector()},
                                Cohorts(model, ["x", "y"]))
    assert frame["cohort"].tolist() == [0, 1, 0, 1, 0]
    assert frame["cohort_rule"].tolist()[:2] == ["x < 5", "x >= 5"]
