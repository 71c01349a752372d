"""A Dask worker killed in the middle of a contribution: Dask recomputes its partition on
another worker, the exact histograms are still byte-identical to the in-process ones, and the
noise is drawn once (one ledger entry, one POST, one charge on the coordinator). A worker
killed in the middle of the dataset-wide ranking of a score run: the lost tasks run again and
the output still equals the in-process engine's, row for row.

The kill is triggered on observed progress: a worker plugin sees a task of the named kind
start executing, writes its process id to a marker file and holds that worker until it is
killed; the test waits for the marker and SIGKILLs that process."""

from __future__ import annotations

import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cloudpickle
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from distributed import Client, WorkerPlugin

from common.detectors import GridKNN, LSHiTables
from common.study.config import FeatureSpec, GridParams, PrivacyParams, new_study_config
from participant.agent import Agent, DataOptions
from participant.dask.engine import local_cluster, score_dataset
from participant.data.dataset import open_source
from participant.data.reader import DataSpec
from participant.release import contribute as rel
from participant.scoring.score import score_source

FEATURES = [{"name": n, "lo": -4.0, "hi": 4.0} for n in ("x", "y", "z", "w")]

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests


class HoldFirstTask(WorkerPlugin):
    """Hold the worker that starts the first task named ``task`` until it is killed."""

    def __init__(self, marker: str, task: str) -> None:
        self.marker, self.task = marker, task

    def transition(self, key, start, finish, **kwargs):
        if finish != "executing" or self.task not in str(key):
            return
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:  # a later task, or the retry of the held one: runs normally
            if Path(self.marker).read_text().endswith(f" {key}"):
                Path(self.marker + ".retried").write_text(str(os.getpid()))
            return
        os.write(fd, f"{os.getpid()} {key}".encode())
        os.close(fd)
        released = Path(self.marker + ".released")
        while not released.exists():  # only the SIGKILL ends this (or the test's cleanup)
            time.sleep(0.05)


def write_dataset(folder: Path) -> None:
    folder.mkdir()
    rng = np.random.default_rng(5)
    for i in range(6):
        X = rng.normal(0.0, 1.0, size=(500 + 37 * i, 4))
        pq.write_table(pa.table({f["name"]: X[:, j] for j, f in enumerate(FEATURES)}),
                       folder / f"part-{i}.parquet")


def run_and_kill(client, marker: Path, work):
    """Run ``work()`` in a thread, SIGKILL the worker the plugin holds once it holds one;
    ``work``'s result and the killed process id."""
    before = set(client.run(os.getpid).values())
    with ThreadPoolExecutor(1) as pool:
        outcome = pool.submit(work)
        deadline = time.monotonic() + 120  # a safety net only: the kill waits for the marker
        while not marker.exists() or not marker.read_text():
            assert time.monotonic() < deadline and not outcome.done(), "no task started"
            time.sleep(0.02)
        victim = int(marker.read_text().split()[0])
        assert victim in before
        os.kill(victim, signal.SIGKILL)
        try:
            result = outcome.result(timeout=240)
        finally:
            Path(str(marker) + ".released").write_text("")
    assert victim not in set(client.run(os.getpid).values())
    return result, victim


@pytest.fixture
def cluster():
    with local_cluster(n_workers=2, security=False) as local:
        yield local


def test_a_killed_worker_is_retried_and_the_release_is_drawn_once(
    participant_coordinator, cluster, tmp_path, monkeypatch
):
    coord = participant_coordinator
    token = coord.new_participant("hospital-kill", "100")
    coord.new_study("dask-kill", FEATURES, members=["hospital-kill"], lsh={"n_tables": 16},
                    grid={"bins": 3, "k": 5}, privacy={"epsilon_lsh": "1", "epsilon_grid": "0.5"})
    data, marker = tmp_path / "records", tmp_path / "marker"
    write_dataset(data)
    agent = Agent(tmp_path / "state")
    agent.enrol(coord.url, token, coord.fingerprint(), epsilon_cap="10")

    draws = []
    real_noise = rel.noisy_releases

    def counted(config, exact, rows_per_id=None):
        draws.append(exact)
        return real_noise(config, exact, rows_per_id)

    monkeypatch.setattr(rel, "noisy_releases", counted)
    with Client(cluster) as client:
        client.register_plugin(HoldFirstTask(str(marker), "partition_counts"))
        options = DataOptions(engine="dask", scheduler=cluster.scheduler_address)
        result, victim = run_and_kill(
            client, marker, lambda: agent.contribute("dask-kill", data, options))
    retried_by = int((tmp_path / "marker.retried").read_text())  # the held partition ran again
    assert retried_by != victim

    assert len(draws) == 1 and len(result.sent) == 1
    config, _ = agent.fetch_config("dask-kill")
    expected = rel.exact_histograms(open_source(data, options.source(data, config).spec),
                                    config.lsh_family(), config.grid_spec(), dense_grid=True)
    assert draws[0].lsh.tobytes() == expected.lsh.tobytes()
    assert draws[0].grid_dense.tobytes() == expected.grid_dense.tobytes()
    with agent.ledger() as ledger:
        assert [e.status for e in ledger.entries()] == ["acknowledged"]
    assert float(coord.budget("hospital-kill")["epsilon_spent"]) == 1.5


def test_a_worker_killed_while_ranking_scores_changes_no_output_row(cluster, tmp_path):
    config = new_study_config("kill-score", [FeatureSpec(**f) for f in FEATURES],
                              privacy=PrivacyParams(epsilon_lsh="1", epsilon_grid="0.5"),
                              n_tables=8, grid=GridParams(bins=3, k=5))
    data, marker = tmp_path / "records", tmp_path / "marker"
    write_dataset(data)
    spec = DataSpec.from_config(config)
    exact = rel.exact_histograms(open_source(data, spec), config.lsh_family(),
                                 config.grid_spec(), dense_grid=True)
    detectors = {"lsh": LSHiTables.from_histogram(config.lsh_family(), exact.lsh),
                 "grid": GridKNN.from_counts(config.grid_spec(), exact.grid_dense, k=5)}
    local_out, dask_out = tmp_path / "local.parquet", tmp_path / "dask.parquet"
    expected = score_source(open_source(data, spec), detectors, local_out, top_k=20)
    with Client(cluster) as client:
        client.register_plugin(HoldFirstTask(str(marker), "_resolve"))
        got, _ = run_and_kill(client, marker, lambda: score_dataset(
            open_source(data, spec), detectors, dask_out, top_k=20,
            scheduler=cluster.scheduler_address, bucket_rows=500))
    assert (tmp_path / "marker.retried").exists()  # the held bucket ran again elsewhere
    assert (got.rows, got.flagged) == (expected.rows, 20)
    assert pq.read_table(dask_out).to_pydict() == pq.read_table(local_out).to_pydict()
    assert not list(tmp_path.glob(".dask.parquet.ranks-*"))  # the scratch files are gone
