"""Participant CLI against a real coordinator: full run, no raw data on the wire, local cap."""

from __future__ import annotations

import json
import re
import stat

import numpy as np
import pyarrow.csv as pacsv
import pytest
from participant_cli_kit import N_ROWS, new_study, run_cli, write_data

from common.wire.encoding import EncodedCounts, decode_counts


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
