"""Issue 25 item 13: one malformed row moves a release by at most one record, for every
release kind, in process and on Dask.

D is a clean file, D' = D plus one malformed row, D+ = D plus one good row. For every release
kind the exact statistic (before noise) built from D' equals the one built from D, and the
one built from D+ differs from it by at most one record's sensitivity. The noise is drawn
from that statistic alone, so the release of D' has exactly the distribution of D's.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.cohorts.params import CohortParams
from common.cohorts.study import protocol_of
from common.study.config import FeatureSpec, GridParams, PrivacyParams, new_study_config
from participant.agent import DataOptions
from participant.cohorts import rounds as cohort_release
from participant.dask import engine as engine_dask
from participant.data.counts import exact_histograms
from participant.data.reader import WRONG_FIELDS
from participant.online.io import RecordParser, read_lines

FEATURES = ("a", "b", "c")
GOOD_ROW = b"5.5,2.25,9.0"
MALFORMED = {
    "empty cell": b"1.0,,3.0",
    "NA": b"1.0,NA,3.0",
    "NaN": b"1.0,nan,3.0",
    "text": b"1.0,abc,3.0",
    "infinite": b"1.0,2.0,inf",
    "minus infinite": b"-inf,2.0,3.0",
    "too few fields": b"1.0,2.0",
    "too many fields": b"1.0,2.0,3.0,4.0",
    "unbalanced quote": b'"1.0,2.0,3.0',
    "invalid UTF-8": b"1.0,\xff\xfe,3.0",
    "every cell bad": b"x,,inf",
}
WHERE = 137  # the malformed row's position among the 200 data rows


def _rows(n: int = 200, seed: int = 11) -> list[bytes]:
    X = np.random.default_rng(seed).uniform(-1.0, 11.0, size=(n, 3)).round(3)  # some clipped
    return [b",".join(repr(float(v)).encode() for v in row) for row in X]


def _csv(path, rows: list[bytes], extra: bytes | None = None, where: int = WHERE):
    lines = list(rows)
    if extra is not None:
        lines.insert(where, extra)
    path.write_bytes(b"\n".join([b"a,b,c", *lines]) + b"\n")
    return path


def _config(layout: str = "dense", cohorts: CohortParams | None = None):
    grid = GridParams(bins=4, k=5, cell_limit=64 if layout == "dense" else 63)
    privacy = PrivacyParams(epsilon_lsh="1", epsilon_grid="0.5",
                            delta_grid="0" if layout == "dense" else "1e-6")
    return new_study_config("s", [FeatureSpec(name=n, lo=0.0, hi=10.0) for n in FEATURES],
                            privacy=privacy, n_tables=12, grid=grid, cohorts=cohorts)


def _histograms(path, config, scheduler=None):
    options = DataOptions(engine="dask" if scheduler else "inprocess", scheduler=scheduler)
    source = options.source(path, config, release=True)
    args = (config.lsh_family(), config.grid_spec())
    dense = config.grid_layout == "dense"
    if scheduler:
        return engine_dask.exact_histograms(source, *args, dense_grid=dense,
                                            scheduler=scheduler), source.report
    return exact_histograms(source, *args, dense_grid=dense), source.report


def _as_dict(exact) -> dict[str, dict[int, int]]:
    """Every released statistic as ``{cell: count}`` (sparse grid cells by their index)."""
    out = {"lsh": dict(enumerate(exact.lsh.tolist()))}
    if exact.grid_dense is not None:
        out["grid"] = dict(enumerate(exact.grid_dense.tolist()))
    else:
        cells = [tuple(c) if isinstance(c, list) else c for c in exact.grid_cells.tolist()]
        out["grid"] = dict(zip(cells, exact.grid_counts.tolist(), strict=True))
    return out


def _l1(a: dict[int, int], b: dict[int, int]) -> int:
    return sum(abs(a.get(k, 0) - b.get(k, 0)) for k in set(a) | set(b))


@pytest.fixture(scope="module")
def scheduler():
    with engine_dask.local_cluster(n_workers=2, security=False) as cluster:
        yield cluster.scheduler_address


def _check_histograms(tmp_path, config, bad: bytes, scheduler=None):
    rows = _rows()
    d, d_bad, d_good = (_csv(tmp_path / f"{name}.csv", rows, extra)
                        for name, extra in (("d", None), ("bad", bad), ("good", GOOD_ROW)))
    base, base_report = _histograms(d, config, scheduler)
    got, report = _histograms(d_bad, config, scheduler)
    plus, _ = _histograms(d_good, config, scheduler)
    assert _as_dict(got) == _as_dict(base)  # exactly the statistic without the row
    assert report.malformed_rows == 1 and base_report.malformed_rows == 0
    assert sum(report.malformed.values()) >= 1
    # the good row moves it by one record: m tables in the LSH vector, one grid cell
    assert _l1(_as_dict(plus)["lsh"], _as_dict(base)["lsh"]) == 12  # n_tables
    assert _l1(_as_dict(plus)["grid"], _as_dict(base)["grid"]) == 1


@pytest.mark.parametrize("bad", MALFORMED.values(), ids=MALFORMED.keys())
@pytest.mark.parametrize("layout", ["dense", "sparse"])
def test_lsh_and_grid_release_ignore_one_malformed_row(tmp_path, layout, bad):
    """Independent LSH with a dense or sparse grid, and the secure vector (the same dense
    ExactCounts, through the same reading path, participant.secagg.round)."""
    _check_histograms(tmp_path, _config(layout), bad)


@pytest.mark.parametrize("bad", [MALFORMED["text"], MALFORMED["too many fields"],
                                 MALFORMED["unbalanced quote"]],
                         ids=["text", "too many fields", "unbalanced quote"])
@pytest.mark.parametrize("layout", ["dense", "sparse"])
def test_lsh_and_grid_release_on_dask_ignore_one_malformed_row(tmp_path, scheduler, layout,
                                                               bad):
    _check_histograms(tmp_path, _config(layout), bad, scheduler)


COHORTS = {
    "kmeans": CohortParams(method="kmeans", k=2, over=2, rounds=2, epsilon="1"),
    "dpm": CohortParams(method="dpm", epsilon="1", depth=2, bins=4),
}


def _states(config, X):
    """Every round's state of a run grown noise-free on X (k-means rounds; DPM levels then
    the leaf round)."""
    protocol = protocol_of(config)
    state, states = protocol.start(), []
    while not protocol.finished(state):
        states.append(state)
        state = protocol.advance(state, [protocol.exact(state, X)])
    return protocol, states


def _cohort_vector(path, config, protocol, state, scheduler=None):
    options = DataOptions(engine="dask" if scheduler else "inprocess", scheduler=scheduler)
    source = options.source(path, config, release=True)
    return cohort_release._exact(protocol, state, source, options), source.report


def _check_cohorts(tmp_path, method, bad, scheduler=None):
    config = _config(cohorts=COHORTS[method])
    rows = _rows()
    d, d_bad, d_good = (_csv(tmp_path / f"{name}.csv", rows, extra)
                        for name, extra in (("d", None), ("bad", bad), ("good", GOOD_ROW)))
    X = np.clip(np.array([[float(v) for v in r.split(b",")] for r in rows]), 0.0, 10.0)
    protocol, states = _states(config, X)
    assert len(states) >= 2
    for state in states:
        base, _ = _cohort_vector(d, config, protocol, state, scheduler)
        got, report = _cohort_vector(d_bad, config, protocol, state, scheduler)
        plus, _ = _cohort_vector(d_good, config, protocol, state, scheduler)
        assert np.any(base != 0)  # the data was read, not a noise-only substitute
        np.testing.assert_array_equal(got, base)
        assert report.malformed_rows == 1
        mechanism = protocol.mechanism(state)
        for part, diff in zip(mechanism.parts, mechanism.split(plus - base), strict=True):
            norm = np.abs(diff).sum() if part.noise == "laplace" else np.sqrt((diff**2).sum())
            assert norm <= part.sensitivity, part.name


@pytest.mark.parametrize("bad", [MALFORMED["empty cell"], MALFORMED["infinite"],
                                 MALFORMED["too few fields"]],
                         ids=["empty cell", "infinite", "too few fields"])
@pytest.mark.parametrize("method", COHORTS)
def test_cohort_rounds_ignore_one_malformed_row(tmp_path, method, bad):
    """Every k-means round and every DPM level (and the leaf round)."""
    _check_cohorts(tmp_path, method, bad)


@pytest.mark.parametrize("method", COHORTS)
def test_cohort_rounds_on_dask_ignore_one_malformed_row(tmp_path, scheduler, method):
    _check_cohorts(tmp_path, method, MALFORMED["empty cell"], scheduler)


@pytest.mark.parametrize("cell", [None, float("nan"), float("inf")], ids=["null", "nan", "inf"])
def test_parquet_release_ignores_one_malformed_row(tmp_path, cell):
    X = np.random.default_rng(2).uniform(0.0, 10.0, size=(200, 3))
    columns = {name: X[:, j].tolist() for j, name in enumerate(FEATURES)}
    pq.write_table(pa.table(columns), tmp_path / "d.parquet")
    columns["b"].insert(WHERE, cell)
    for name in ("a", "c"):
        columns[name].insert(WHERE, 1.0)
    pq.write_table(pa.table(columns), tmp_path / "bad.parquet")
    config = _config()
    base, _ = _histograms(tmp_path / "d.parquet", config)
    got, report = _histograms(tmp_path / "bad.parquet", config)
    assert _as_dict(got) == _as_dict(base) and report.malformed == {"b": 1}


def test_the_drop_is_counted_per_column_locally(tmp_path):
    rows = _rows()
    path = _csv(tmp_path / "d.csv", [*rows, b"x,,inf", b"1,2"], None)
    _, report = _histograms(path, _config())
    assert report.malformed == {"a": 1, "b": 1, "c": 1, WRONG_FIELDS: 1}
    assert report.malformed_rows == 2
    assert "2 malformed row(s) dropped" in (report.malformed_note() or "")


BAD_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                          blacklist_characters="\n\r"), max_size=8).filter(
    lambda s: not _is_number(s))


def _is_number(text: str) -> bool:
    try:
        float(pa.scalar(text.strip('"')).cast(pa.float64()).as_py() or 0)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    return text.strip('"') not in ("", "NA", "null", "NULL", "NaN", "nan", "N/A")


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.integers(0, 200), column=st.integers(0, 2), text=BAD_TEXT)
def test_any_non_numeric_cell_anywhere_drops_its_row_only(tmp_path, where, column, text):
    rows = _rows(60)
    fields = [b"1.0", b"2.0", b"3.0"]
    fields[column] = text.encode()
    bad = b",".join(fields)
    config = _config()
    base, _ = _histograms(_csv(tmp_path / "d.csv", rows), config)
    got, report = _histograms(_csv(tmp_path / "bad.csv", rows, bad, min(where, 60)), config)
    assert _as_dict(got) == _as_dict(base)
    assert report.malformed_rows == 1


STREAM_BAD = ['{"a": 1, "b": "x", "c": 3}', '{"a": 1, "b": NaN, "c": 3}', '{"a": 1, "c": 3}',
              '{"a": 1, "b": 1e999, "c": 3}', '{"a": 1, "b": 1' + "0" * 400 + ', "c": 3}',
              "[1, 2, 3]", '{"a": [1], "b": 2, "c": 3}', "{not json"]


@pytest.mark.parametrize("bad", STREAM_BAD)
def test_stream_records_ignore_one_malformed_line(bad):
    """The online (streaming) release learns from the records the parser yields: a malformed
    line yields none (counted locally), a good one exactly one."""
    lines = [json.dumps(dict(zip(FEATURES, map(float, r.split(b",")), strict=True)))
             for r in _rows(50)]

    def records(extra):
        parser = RecordParser(list(FEATURES), "id")
        all_lines = [*lines[:20], *([extra] if extra else []), *lines[20:]]
        out = [parser.parse(line) for line in all_lines]
        return [x.tolist() for _, x in (r for r in out if r is not None)], parser.bad

    base, _ = records(None)
    got, dropped = records(bad)
    plus, _ = records('{"a": 5.5, "b": 2.25, "c": 9.0}')
    assert got == base and dropped == 1
    assert len(plus) == len(base) + 1 and plus[20] == [5.5, 2.25, 9.0]


def test_dask_partitions_drop_and_the_client_sums_their_counts(tmp_path, scheduler):
    folder = tmp_path / "ds"
    folder.mkdir()
    rows = _rows()
    _csv(folder / "part-0.csv", rows[:100], MALFORMED["text"], 10)
    _csv(folder / "part-1.csv", rows[100:], MALFORMED["too few fields"], 50)
    clean = tmp_path / "clean"
    clean.mkdir()
    _csv(clean / "part-0.csv", rows[:100])
    _csv(clean / "part-1.csv", rows[100:])
    config = _config()
    local, local_report = _histograms(folder, config)
    remote, remote_report = _histograms(folder, config, scheduler)
    base, _ = _histograms(clean, config, scheduler)
    assert _as_dict(remote) == _as_dict(local) == _as_dict(base)
    assert remote_report.malformed == local_report.malformed == {"b": 1, WRONG_FIELDS: 1}
    assert remote_report.malformed_rows == 2


def test_stream_stdin_with_invalid_utf8_drops_that_line_only():
    lines = [b"a,b,c", b"1,2,3", b"4,\xff,6", b"7,8,9"]
    stream = io.TextIOWrapper(io.BytesIO(b"\n".join(lines) + b"\n"), encoding="utf-8")
    parser = RecordParser(list(FEATURES), "id")
    got = [x.tolist() for _, x in read_lines(stream, parser)]
    assert got == [[1.0, 2.0, 3.0], [7.0, 8.0, 9.0]] and parser.bad == 1
