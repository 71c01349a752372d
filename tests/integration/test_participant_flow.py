"""Participant CLI against a real coordinator: full run, no raw data on the wire, local cap."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.csv as pacsv
import pytest

from common.encoding import EncodedCounts, decode_counts

EXE = str(Path(sys.executable).with_name("fedod-participant"))
FEATURES = [{"name": n, "lo": 0.0, "hi": 10.0} for n in ("age", "bp", "chol", "hr")]
N_ROWS = 1237


SLOT_ENV = {**os.environ, "FEDOD_SEND_SLOT": "0.2"}  # a short send slot keeps tests quick


def run_cli(state: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [EXE, "--state", str(state), "--no-progress", *args],
        capture_output=True, text=True, timeout=120, env=SLOT_ENV,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def write_data(path: Path, n: int = N_ROWS, seed: int = 7) -> np.ndarray:
    """Records with distinctive 6-decimal values, a key, a label and a few out-of-bounds."""
    rng = np.random.default_rng(seed)
    X = rng.normal(5.0, 1.0, size=(n, 4)).round(6)
    corners = rng.integers(0, 2, size=(6, 4)) * 9.4 + 0.3 + rng.uniform(0, 0.01, size=(6, 4))
    X[:6] = corners.round(6)  # isolated records far from the bulk
    X[6:9, 0] = 11.5  # outside the public bounds: clipped locally
    lines = ["pid,age,bp,chol,hr,label"]
    lines += [f"patient-{i:06d},{','.join(f'{v:.6f}' for v in row)},{int(i < 6)}"
              for i, row in enumerate(X)]
    path.write_text("\n".join(lines) + "\n")
    return X


def new_study(coord, study: str, participant: str, cap: str = "100") -> str:
    token = coord.new_participant(participant, cap)
    coord.new_study(study, FEATURES, members=[participant], lsh={"n_tables": 25},
                    grid={"bins": 4, "k": 5}, privacy={"epsilon_lsh": "1", "epsilon_grid": "0.5"})
    return token


def test_full_run_sends_only_noisy_histograms(participant_coordinator, recording_proxy, tmp_path):
    coord, proxy = participant_coordinator, recording_proxy
    token = new_study(coord, "flow", "hospital-flow")
    data, state = tmp_path / "records.csv", tmp_path / "state"
    X = write_data(data)
    (tmp_path / "token").write_text(token)
    cols = ["--id-column", "pid", "--ignore-column", "label"]

    run_cli(state, "enrol", "--coordinator", proxy.url, "--fingerprint", coord.fingerprint(),
            "--token-file", str(tmp_path / "token"), "--epsilon-cap", "4")
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in state.iterdir() if p.is_file())
    assert "config v1 verified" in run_cli(state, "config", "flow").stdout
    checked = run_cli(state, "check-data", "flow", str(data), *cols).stdout
    assert f"{N_ROWS} records" in checked and "age: 3" in checked
    contributed = run_cli(state, "contribute", "flow", str(data), *cols, "--json")
    assert json.loads(contributed.stdout)["clipped"] == {"age": 3}
    out = tmp_path / "scores.csv"
    scored = run_cli(state, "score", "flow", str(data), *cols, "-o", str(out), "--top-k", "6")
    assert "flagged 6" in scored.stdout and "1 contributor" in scored.stdout
    table = pacsv.read_csv(out)
    assert table.num_rows == N_ROWS
    assert table["pid"].to_pylist()[:2] == ["patient-000000", "patient-000001"]
    assert sum(table["outlier"].to_pylist()) == 6
    ranks = table["rank"].to_numpy()[:6]
    assert np.median(ranks) < 0.05 * N_ROWS, ranks  # isolated records rank near the top
    ledger = json.loads(run_cli(state, "ledger", "--json").stdout)
    assert [e["status"] for e in ledger["entries"]] == ["acknowledged"]
    assert coord.budget("hospital-flow")["epsilon_spent"] == "1.5"
    status = json.loads(run_cli(state, "status", "--json").stdout)
    assert status["pending"] == []
    assert status["coordinator_spent"] == status["spent"] == {"epsilon": "1.5", "delta": "0"}
    assert status["cap"]["epsilon"] == "4"  # budgets are numbers as decimal strings

    keys = [r for r in proxy.requests if r[:2] == ("POST", "/v1/me/identity-key")]
    assert [set(json.loads(r[3])) for r in keys] == [{"public_key", "proof"}]  # enrol: identity key
    posts = [r for r in proxy.requests if r[0] == "POST" and r not in keys]
    assert len(posts) == 1
    wire = "\n".join(f"{m} {p} {h} {b.decode()}" for m, p, h, b in proxy.requests)
    for value in X[::37].ravel():
        for text in (f"{value:.6f}", repr(float(value))):
            assert text not in wire
    assert "patient-" not in wire and "label" not in wire
    assert not re.search(rf"(?<![0-9A-Za-z+/]){N_ROWS}(?![0-9A-Za-z+/])", wire)
    body = json.loads(posts[0][3])
    assert set(body) == {"idempotency_key", "config_version", "config_digest", "epsilon",
                         "delta", "lsh", "grid"}
    for name in ("lsh", "grid"):
        enc = EncodedCounts.model_validate(body[name])
        _, values = decode_counts(enc, expected_cells=enc.n_cells)
        assert enc.layout == "dense" and values.size == enc.n_cells  # every cell released
    _, grid_values = decode_counts(EncodedCounts.model_validate(body["grid"]),
                                   expected_cells=256)
    assert int(grid_values.sum()) != N_ROWS or np.any(grid_values < 0)


def test_local_cap_stops_a_release_the_coordinator_would_accept(
    participant_coordinator, recording_proxy, tmp_path
):
    coord, proxy = participant_coordinator, recording_proxy
    token = new_study(coord, "capped", "hospital-cap", cap="100")
    data, state = tmp_path / "records.csv", tmp_path / "state"
    write_data(data)
    run_cli(state, "enrol", "--coordinator", proxy.url, "--fingerprint", coord.fingerprint(),
            "--token", token, "--epsilon-cap", "2")
    cols = ["--id-column", "pid", "--ignore-column", "label"]
    run_cli(state, "contribute", "capped", str(data), *cols)
    refused = run_cli(state, "contribute", "capped", str(data), *cols, check=False)
    assert refused.returncode == 5, refused.stderr
    assert "privacy budget exceeded" in refused.stderr and "local ledger" not in refused.stdout
    releases = [r for r in proxy.requests if r[0] == "POST" and "/contributions" in r[1]]
    assert len(releases) == 1
    assert len(list((state / "outbox").iterdir())) == 1
    budget = coord.budget("hospital-cap")
    assert budget["epsilon_spent"] == "1.5" and len(budget["entries"]) == 1


@pytest.mark.parametrize(
    ("args", "code"),
    [(["status"], 2), (["contribute", "nope", "x.csv"], 2), (["bogus"], 2)],
)
def test_exit_codes_without_enrolment(tmp_path, args, code):
    assert run_cli(tmp_path / "empty", *args, check=False).returncode == code
