"""Loading and checking local data: errors name file, column and rows; clipping is counted."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.errors import SchemaMismatch
from participant.data.reader import DataSource, DataSpec, load_all

SPEC = DataSpec(("x", "y"), np.array([0.0, 0.0]), np.array([10.0, 10.0]))


def write_csv(tmp_path, text, name="d.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("x\n1\n", r"missing column\(s\) \['y'\]"),
        ("x,y,z\n1,2,3\n", r"unexpected column\(s\) \['z'\].*--ignore-column"),
        ("x,y\n1,2\n3,abc\n4,5\n", r"column 'y': non-numeric values; first bad rows: 2 \('abc'\)"),
        ("x,y\n1,2\n,3\n4,NA\n", r"column 'x': missing values; first bad rows: 2"),
        ("x,y\n1,2\n1,inf\n", r"column 'y': non-finite values; first bad rows: 2"),
        ("x,y\n1,2\n1,2,3\n", r"Expected 2 columns, got 3"),
    ],
)
def test_bad_csv_names_file_column_and_rows(tmp_path, text, match):
    path = write_csv(tmp_path, text)
    with pytest.raises(SchemaMismatch, match=match) as info:
        load_all(DataSource(path, SPEC))
    assert str(path) in str(info.value)


def test_id_and_ignored_columns_are_allowed(tmp_path):
    path = write_csv(tmp_path, "rid,x,label,y\nr1,1,0,2\nr2,3,1,4\n")
    spec = DataSpec(SPEC.features, SPEC.lo, SPEC.hi, id_column="rid", ignore=("label",))
    chunks = list(DataSource(path, spec))
    np.testing.assert_array_equal(chunks[0].X, [[1, 2], [3, 4]])
    assert chunks[0].keys.to_pylist() == ["r1", "r2"]


def test_out_of_bounds_values_are_clipped_and_counted_locally(tmp_path):
    path = write_csv(tmp_path, "x,y\n-1,2\n11,12\n5,5\n")
    source = DataSource(path, SPEC)
    np.testing.assert_array_equal(load_all(source), [[0, 2], [10, 10], [5, 5]])
    assert source.report.clipped == {"x": 2, "y": 1}
    assert source.report.rows == 3


def test_out_of_bounds_can_be_refused(tmp_path):
    path = write_csv(tmp_path, "x,y\n1,2\n11,2\n")
    spec = DataSpec(SPEC.features, SPEC.lo, SPEC.hi, on_out_of_bounds="error")
    with pytest.raises(SchemaMismatch, match=r"outside the public bounds.*first bad rows: 2"):
        load_all(DataSource(path, spec))


def test_parquet_is_read_in_bounded_chunks_with_global_row_numbers(tmp_path):
    n = 1000
    x = np.linspace(0, 9, n)
    y = x.copy()
    y[700] = np.nan
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"x": x, "y": y}), path, row_group_size=128)
    source = DataSource(path, SPEC, chunk_rows=100)
    with pytest.raises(SchemaMismatch, match=r"column 'y': missing values.*rows: 701"):
        for chunk in source:
            assert len(chunk.X) <= 100


def test_parquet_string_column_is_non_numeric(tmp_path):
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"x": ["1", "2", "oops"], "y": [1.0, 2.0, 3.0]}), path)
    with pytest.raises(SchemaMismatch, match=r"column 'x': non-numeric values.*3 \('oops'\)"):
        load_all(DataSource(path, SPEC))


def test_large_csv_is_streamed_in_several_batches(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 10, size=(60_000, 2))
    path = tmp_path / "big.csv"
    np.savetxt(path, X, delimiter=",", header="x,y", comments="", fmt="%.6f")
    source = DataSource(path, SPEC, chunk_rows=1000)
    source_chunks = list(source)
    assert len(source_chunks) > 1
    np.testing.assert_allclose(np.concatenate([c.X for c in source_chunks]), X, atol=1e-6)
    assert source.report.rows == 60_000


@pytest.mark.parametrize("name", ["d.json", "missing.csv"])
def test_unknown_format_or_missing_file(tmp_path, name):
    if name.endswith(".json"):
        (tmp_path / name).write_text("{}")
    with pytest.raises(SchemaMismatch, match=name):
        DataSource(tmp_path / name, SPEC)


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [(0.31, 0.31, (0.3, 0.4)), (0.3, 0.30000000000000004, (0.3, 0.4)),
     (-0.0042, 7e-05, (-0.005, 7e-05)), (12.5, 1234.0, (10.0, 2000.0))],
)
def test_exported_public_bounds_are_round_numbers(lo, hi, expected):
    from simulation.demo_data import study_bounds

    (got,) = study_bounds(np.array([[lo], [hi]]))
    assert got == expected
    assert all(len(repr(v)) <= 8 for v in got)  # no 0.30000000000000004 in a spec file


def test_check_data_names_every_bad_column(tmp_path):
    """Issue 28: one error names every bad column of the chunk, with its first bad rows."""
    path = write_csv(tmp_path, "x,y\n1,2\n,abc\n3,inf\n")
    with pytest.raises(SchemaMismatch) as info:
        load_all(DataSource(path, SPEC))
    text = str(info.value)
    assert "column 'x': missing values; first bad rows: 2" in text
    assert ("column 'y': non-numeric values and non-finite values; "
            "first bad rows: 2 ('abc'), 3") in text
    assert info.value.context["columns"] == ["x", "y"]


def test_a_release_drops_a_row_without_a_key_under_rows_per_id(tmp_path):
    path = write_csv(tmp_path, "rid,x,y\nr1,1,2\n,3,4\nr1,5,6\nr2,7,8\n")
    spec = DataSpec(SPEC.features, SPEC.lo, SPEC.hi, id_column="rid", rows_per_id=1,
                    on_bad_row="drop")
    source = DataSource(path, spec)
    np.testing.assert_array_equal(load_all(source), [[1, 2], [7, 8]])
    assert source.report.malformed == {"rid": 1} and source.report.dropped == 1


def test_a_release_reads_spaced_and_quoted_numbers_like_check_data(tmp_path):
    path = write_csv(tmp_path, 'x,y\n1, 2\n 4 ,5 \n"7", "8" \n"1,2\n')
    drop = DataSpec(SPEC.features, SPEC.lo, SPEC.hi, on_bad_row="drop")
    source = DataSource(path, drop)
    np.testing.assert_array_equal(load_all(source), [[1, 2], [4, 5], [7, 8]])
    assert source.report.malformed == {"x": 1}  # the unbalanced quote spoils its line only
    np.testing.assert_array_equal(load_all(DataSource(write_csv(tmp_path, 'x,y\n1, 2\n 4 ,5 \n',
                                                                "ok.csv"), SPEC)),
                                  [[1, 2], [4, 5]])
