"""The Dask engine on a real ``distributed.LocalCluster`` (2 worker processes, loopback):
exact histograms byte-identical to the in-process engine, same errors, same scores."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from distributed import Client

from common.detectors import GridKNN, LSHiTables
from common.detectors.combine import combine, shares
from common.errors import SchemaMismatch
from common.study.config import FeatureSpec, GridParams, PrivacyParams, new_study_config
from participant.dask import engine as engine_dask
from participant.dask import ranks as dask_ranks
from participant.data.dataset import DatasetSource, dataset_files, open_source
from participant.data.reader import DataSource, DataSpec
from participant.release import contribute as rel
from participant.scoring.score import score_source

FEATURES = ("a", "b", "c")


@pytest.fixture(scope="module")
def scheduler():
    with engine_dask.local_cluster(n_workers=2, security=False) as cluster:
        yield cluster.scheduler_address


def write_dataset(folder, fmt="parquet", sizes=(700, 1, 1234, 555), seed=3, keys=False):
    """Files of uneven size with values partly outside the public bounds [0, 10]."""
    folder.mkdir()
    rng = np.random.default_rng(seed)
    first = 0
    for i, n in enumerate(sizes):
        X = rng.uniform(-1.0, 11.0, size=(n, 3)).round(4)
        cols = {name: X[:, j] for j, name in enumerate(FEATURES)}
        if keys:
            cols = {"pid": [f"p{first + r}" for r in range(n)], **cols}
        first += n
        if fmt == "parquet":
            pq.write_table(pa.table(cols), folder / f"part-{i:02d}.parquet")
        else:
            lines = [",".join(cols)] + [",".join(str(v) for v in row)
                                        for row in zip(*cols.values(), strict=True)]
            (folder / f"part-{i:02d}.csv").write_text("\n".join(lines) + "\n")
    return folder


def config_for(layout):
    grid = GridParams(bins=4, k=5, cell_limit=64 if layout == "dense" else 63)
    privacy = PrivacyParams(epsilon_lsh="1", epsilon_grid="0.5",
                            delta_grid="0" if layout == "dense" else "1e-6")
    config = new_study_config("s", [FeatureSpec(name=n, lo=0.0, hi=10.0) for n in FEATURES],
                              privacy=privacy, n_tables=12, grid=grid)
    assert config.grid_layout == layout
    return config


def counts_bytes(exact):
    return [None if a is None else a.tobytes()
            for a in (exact.lsh, exact.grid_dense, exact.grid_cells, exact.grid_counts)]


@pytest.mark.parametrize(("fmt", "layout"), [("parquet", "dense"), ("csv", "sparse")])
def test_exact_histograms_are_byte_identical_to_in_process(tmp_path, scheduler, fmt, layout):
    config = config_for(layout)
    folder = write_dataset(tmp_path / "ds", fmt)
    spec = DataSpec.from_config(config)
    args = (config.lsh_family(), config.grid_spec())
    dense = layout == "dense"
    local = DatasetSource(folder, spec, chunk_rows=256)
    expected = rel.exact_histograms(local, *args, dense_grid=dense)
    remote = DatasetSource(folder, spec, chunk_rows=256)
    got = engine_dask.exact_histograms(remote, *args, dense_grid=dense, scheduler=scheduler)
    assert counts_bytes(got) == counts_bytes(expected)
    assert int(got.lsh.sum()) == 12 * sum((700, 1, 1234, 555))
    assert remote.report == local.report and sum(local.report.clipped.values()) > 0


def test_a_glob_selects_the_same_partitions(tmp_path):
    folder = write_dataset(tmp_path / "ds")
    (folder / "_SUCCESS").write_text("")
    assert dataset_files(folder) == dataset_files(str(folder / "*.parquet"))
    assert len(dataset_files(folder)) == 4
    with pytest.raises(SchemaMismatch, match="no .csv or .parquet files"):
        dataset_files(tmp_path / "ds" / "*.json")


@pytest.mark.parametrize(("bad", "problem"), [("x7", "non-numeric values"),
                                              ("", "missing values")])
def test_a_malformed_partition_fails_with_the_in_process_error(tmp_path, scheduler, bad,
                                                               problem):
    config = config_for("dense")
    folder = write_dataset(tmp_path / "ds", "csv")
    lines = (folder / "part-02.csv").read_text().splitlines()
    lines[58] = lines[58].replace(lines[58].split(",")[1], bad, 1)
    (folder / "part-02.csv").write_text("\n".join(lines) + "\n")
    spec = DataSpec.from_config(config)
    args = (config.lsh_family(), config.grid_spec())
    with pytest.raises(SchemaMismatch) as single:
        rel.exact_histograms(DataSource(folder / "part-02.csv", spec), *args, dense_grid=True)
    with pytest.raises(SchemaMismatch) as local:
        rel.exact_histograms(DatasetSource(folder, spec), *args, dense_grid=True)
    with pytest.raises(SchemaMismatch) as remote:
        engine_dask.exact_histograms(DatasetSource(folder, spec), *args, dense_grid=True,
                                     scheduler=scheduler)
    assert str(remote.value) == str(local.value) == str(single.value)
    assert f"column 'b': {problem}; first bad rows: 58" in str(remote.value)


@pytest.mark.parametrize("bucket_rows", [engine_dask.BUCKET_ROWS, 300])
def test_scores_equal_the_in_process_scores(tmp_path, scheduler, bucket_rows):
    config = config_for("dense")
    folder = write_dataset(tmp_path / "ds", keys=True)
    spec = DataSpec.from_config(config, id_column="pid")
    exact = rel.exact_histograms(open_source(folder, spec), config.lsh_family(),
                                 config.grid_spec(), dense_grid=True)
    detectors = {
        "lsh": LSHiTables.from_histogram(config.lsh_family(), exact.lsh),
        "grid": GridKNN.from_counts(config.grid_spec(), exact.grid_dense, k=5),
    }
    local_out, dask_out = tmp_path / "local.parquet", tmp_path / "dask.parquet"
    expected = score_source(open_source(folder, spec), detectors, local_out, top_k=9)
    got = engine_dask.score_dataset(open_source(folder, spec), detectors, dask_out, top_k=9,
                                    scheduler=scheduler, bucket_rows=bucket_rows)
    assert (got.rows, got.flagged, got.clipped) == (expected.rows, 9, expected.clipped)
    assert len(list(dask_out.glob("*.parquet"))) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dask.parquet", "ds", "local.parquet"]
    assert pq.read_table(dask_out).to_pydict() == pq.read_table(local_out).to_pydict()
    with pytest.raises(ValueError, match="exists"):
        engine_dask.score_dataset(open_source(folder, spec), detectors, dask_out,
                                  scheduler=scheduler)


def test_scheduler_without_the_dask_engine_is_a_usage_error(tmp_path, capsys):
    from participant.cli.main import main

    code = main(["--state", str(tmp_path / "state"), "check-data", "s", str(tmp_path / "d.csv"),
                 "--scheduler", "tls://10.0.0.5:8786"])
    assert code == 2
    assert "--scheduler needs --engine dask" in capsys.readouterr().err


def test_an_unreachable_scheduler_is_a_clear_error(tmp_path):
    import socket

    import dask

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    config = config_for("dense")
    source = DatasetSource(write_dataset(tmp_path / "ds"), DataSpec.from_config(config))
    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}), \
            pytest.raises(OSError, match="cannot connect to the Dask scheduler at tcp://127"):
        engine_dask.exact_histograms(source, config.lsh_family(), config.grid_spec(),
                                     dense_grid=True, scheduler=address)


def test_a_cohort_rounds_exact_vector_on_dask_equals_in_process(tmp_path, scheduler):
    from common.cohorts.params import CohortParams
    from common.cohorts.study import protocol_for
    from participant.dask.cohorts import exact_vector

    folder = write_dataset(tmp_path / "ds")
    config = config_for("dense")
    for params in (CohortParams(k=3, epsilon="1"), CohortParams(method="dpm", epsilon="1")):
        protocol = protocol_for(params, config.lo, config.hi, bytes.fromhex(config.lsh.seed))
        state = protocol.start()
        local = open_source(folder, DataSpec.from_config(config))
        expected = sum(protocol.exact(state, chunk.X) for chunk in local)
        remote = open_source(folder, DataSpec.from_config(config))
        got = exact_vector(remote, protocol, state, scheduler=scheduler)
        assert got.tobytes() == expected.tobytes() and got.sum() > 0


class Recording:
    """A client that counts the numbers the cluster sends it through ``gather``."""

    def __init__(self, client):
        self.client, self.received = client, 0

    def __getattr__(self, name):
        return getattr(self.client, name)

    def gather(self, futures, *args, **kwargs):
        out = self.client.gather(futures, *args, **kwargs)
        self.received += numbers_in(out)
        return out


def numbers_in(value):
    if isinstance(value, list | tuple):
        return sum(numbers_in(v) for v in value)
    return int(np.size(value))


def test_ranking_on_the_cluster_sends_the_client_no_per_record_data(tmp_path, scheduler):
    rng = np.random.default_rng(11)
    sizes = [30_000, 0, 25_000, 1, 24_999]
    frames = [pd.DataFrame({"score_a": rng.integers(0, 200, n).astype(float),
                            "score_b": rng.normal(size=n)}) for n in sizes]
    weights = {"a": 1.0, "b": 3.0}
    with Client(scheduler) as client:
        parts = client.scatter([(frame, None) for frame in frames])
        recording = Recording(client)
        combined, rank = dask_ranks.combined_ranks(
            recording, parts, sizes, shares(["a", "b"], weights), tmp_path / "scratch",
            bucket_rows=8_000)
        got_combined = np.concatenate(client.gather(combined))
        got_rank = np.concatenate(client.gather(rank))
    expected = combine({name: pd.concat(frames)[f"score_{name}"].to_numpy()
                        for name in ("a", "b")}, weights)
    assert got_combined.tobytes() == expected[0].tobytes()
    assert got_rank.tolist() == expected[1].tolist()
    assert 0 < recording.received < sum(sizes) / 10  # samples and per-bucket counts only
    assert len(list((tmp_path / "scratch" / "combined").glob("bucket-*.npy"))) == 10


def test_long_work_on_the_cluster_shows_partitions_and_passes_done(tmp_path, scheduler, capsys):
    config = config_for("dense")
    folder = write_dataset(tmp_path / "ds")
    spec = DataSpec.from_config(config)
    exact = engine_dask.exact_histograms(open_source(folder, spec, progress=True),
                                         config.lsh_family(), config.grid_spec(),
                                         dense_grid=True, scheduler=scheduler)
    detectors = {"lsh": LSHiTables.from_histogram(config.lsh_family(), exact.lsh),
                 "grid": GridKNN.from_counts(config.grid_spec(), exact.grid_dense, k=5)}
    out = tmp_path / "new" / "s.parquet"  # a parent that does not exist yet is made
    engine_dask.score_dataset(open_source(folder, spec), detectors, out, progress=True,
                              scheduler=scheduler)
    assert len(list(out.glob("*.parquet"))) == 4 and [p.name for p in out.parent.iterdir()] == [
        "s.parquet"]
    err = capsys.readouterr().err
    assert "counting ds: 100.0% 4 partitions" in err
    assert "scoring ds: 100.0% 4 partitions" in err
    assert "ranking: 100.0% 3 passes" in err  # one per detector, one for the combined score


def test_a_scratch_directory_workers_cannot_write_is_a_clear_error(tmp_path):
    with pytest.raises(OSError, match="every worker can write"):
        dask_ranks._save(tmp_path / "missing" / "part-0.npy", np.zeros(3))
