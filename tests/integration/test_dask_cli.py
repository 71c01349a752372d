"""`fedod-participant ... --engine dask` as real processes against a real coordinator: the CLI
starts its own LocalCluster, a malformed partition is refused exactly as in-process (before
any request, also by contribute), and a
contribution plus scoring of a many-file dataset works end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common.wire.encoding import EncodedCounts

EXE = str(Path(sys.executable).with_name("fedod-participant"))
FEATURES = [{"name": n, "lo": 0.0, "hi": 10.0} for n in ("age", "bp", "chol")]
SIZES = (400, 250, 333)


def run_cli(state: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, "--state", str(state), "--no-progress", *args],
                          capture_output=True, text=True, timeout=300)


def releases(proxy) -> list:
    """The contribution POSTs the proxy saw (enrol also POSTs the identity key)."""
    return [r for r in proxy.requests if r[:2] == ("POST", "/v1/studies/dask-cli/contributions")]


def write_dataset(folder: Path) -> None:
    folder.mkdir()
    rng = np.random.default_rng(11)
    first = 0
    for i, n in enumerate(SIZES):
        X = rng.normal(5.0, 1.5, size=(n, 3)).round(5)
        cols = {"pid": [f"patient-{first + r:05d}" for r in range(n)],
                **{f["name"]: X[:, j] for j, f in enumerate(FEATURES)}}
        pq.write_table(pa.table(cols), folder / f"part-{i}.parquet")
        first += n


def test_dask_engine_from_the_cli(participant_coordinator, recording_proxy, tmp_path):
    coord = participant_coordinator
    token = coord.new_participant("hospital-dask", "100")
    coord.new_study("dask-cli", FEATURES, members=["hospital-dask"], lsh={"n_tables": 10},
                    grid={"bins": 3, "k": 5}, privacy={"epsilon_lsh": "1", "epsilon_grid": "0.5"})
    state, data = tmp_path / "state", tmp_path / "records"
    write_dataset(data)
    enrolled = run_cli(state, "enrol", "--coordinator", recording_proxy.url, "--fingerprint",
                       coord.fingerprint(), "--token", token, "--epsilon-cap", "10")
    assert enrolled.returncode == 0, enrolled.stderr

    # A malformed partition: NaN in one file. Same message and exit code on both engines.
    table = pq.read_table(data / "part-1.parquet")
    bp = table["bp"].to_numpy().copy()
    bp[[16, 200]] = np.nan
    bad = table.set_column(2, "bp", pa.array(bp))
    pq.write_table(bad, data / "part-1.parquet")
    cols = ["--id-column", "pid"]
    single = run_cli(state, "check-data", "dask-cli", str(data / "part-1.parquet"), *cols)
    local = run_cli(state, "check-data", "dask-cli", str(data), *cols)
    dask = run_cli(state, "check-data", "dask-cli", str(data), *cols, "--engine", "dask")
    assert single.returncode == local.returncode == dask.returncode == 3, dask.stderr
    assert ("column 'bp': missing values (NaN) in 2 row(s); first bad rows: 17 (nan), 201 (nan)"
            in single.stderr)
    in_dataset = ("column 'bp': missing values (NaN) in 2 row(s); first bad rows: "
                  "part-1.parquet row 17 (nan), part-1.parquet row 201 (nan)")
    assert in_dataset in local.stderr and in_dataset in dask.stderr
    assert not releases(recording_proxy)
    # contribute runs the same whole-file check before any request: refused, nothing sent
    refused = run_cli(state, "contribute", "dask-cli", str(data), *cols, "--engine", "dask",
                      "--send-slot", "0")
    assert refused.returncode == 3 and in_dataset in refused.stderr
    assert "refused before anything was sent or charged" in refused.stderr
    assert not releases(recording_proxy)
    # --drop-malformed-rows releases it: each malformed row dropped as a removed record
    # (participant.data.reader), counted on the workers and summed locally.
    dropped = run_cli(state, "contribute", "dask-cli", str(data), *cols, "--engine", "dask",
                      "--send-slot", "0", "--drop-malformed-rows")
    assert dropped.returncode == 0, dropped.stderr
    assert "2 malformed row(s) dropped" in dropped.stderr and "bp: 2" in dropped.stderr
    assert len(releases(recording_proxy)) == 1
    # A partition whose column has a non-numeric type: the whole-file check on the workers
    # refuses it before any request (exit 3, nothing sent or charged).
    dates = pa.array(np.arange(table.num_rows).astype("datetime64[s]"))
    pq.write_table(table.set_column(2, "bp", dates), data / "part-1.parquet")
    bad_release = run_cli(state, "contribute", "dask-cli", str(data), *cols, "--engine", "dask",
                          "--send-slot", "0")
    assert bad_release.returncode == 3, bad_release.stderr
    assert "non-numeric type" in bad_release.stderr
    assert len(releases(recording_proxy)) == 1

    pq.write_table(table, data / "part-1.parquet")
    checked = run_cli(state, "check-data", "dask-cli", str(data), *cols, "--engine", "dask",
                      "--json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["rows"] == sum(SIZES)
    sent = run_cli(state, "contribute", "dask-cli", str(data), *cols, "--engine", "dask",
                   "--send-slot", "0", "--json")
    assert sent.returncode == 0, sent.stderr
    assert float(json.loads(sent.stdout)["epsilon_spent"]) == 3.0  # 2 releases, 1.5 each
    posts = [json.loads(r[3]) for r in releases(recording_proxy)]
    assert len(posts) == 2 and set(posts[1]) == {"idempotency_key", "config_version",
                                                 "config_digest", "epsilon", "delta", "lsh",
                                                 "grid"}
    assert EncodedCounts.model_validate(posts[1]["grid"]).layout == "dense"

    out = tmp_path / "scores.parquet"
    scored = run_cli(state, "score", "dask-cli", str(data), *cols, "--engine", "dask",
                     "-o", str(out), "--top-k", "7", "--json")
    assert scored.returncode == 0, scored.stderr
    doc = json.loads(scored.stdout)
    assert (doc["rows"], doc["flagged"]) == (sum(SIZES), 7)
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".parquet") == [
        "part.0.parquet", "part.1.parquet", "part.2.parquet"]
    result = pq.read_table(out)
    assert result["pid"].to_pylist() == [f"patient-{r:05d}" for r in range(sum(SIZES))]
    assert sorted(result["rank"].to_pylist()) == list(range(1, sum(SIZES) + 1))
    assert sum(result["outlier"].to_pylist()) == 7
