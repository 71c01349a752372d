"""`fedod-participant stream` against a real coordinator process: scores, labels, releases,
the online model, a kill and restart, and a cap reached mid-stream."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from participant.agent import Agent

EXE = str(Path(sys.executable).with_name("fedod-participant"))
FEATURES = [{"name": n, "lo": 0.0, "hi": 1.0} for n in ("a", "b", "c")]
ONLINE = {"dim": 4, "batch": 5, "p": 0.5, "epoch_records": 1000}


def setup(coord, tmp_path: Path, study: str, name: str, *, cap: str = "50", online=None,
          n: int = 400) -> tuple[Path, Path, Path]:
    """Study with an online section, an enrolled participant, a records file whose labels
    are all in the labels file (the simulated reviewer)."""
    token = coord.new_participant(name, cap, "0.001")
    coord.new_study(study, FEATURES, members=[name], lsh={"n_tables": 10},
                    privacy={"epsilon_lsh": "1"}, online={**ONLINE, **(online or {})})
    state = tmp_path / "state"
    Agent(state).enrol(coord.url, token, coord.fingerprint(), epsilon_cap=cap,
                       delta_cap="0.001", max_release_epsilon="5")
    rng = np.random.default_rng(7)
    X = rng.uniform(0, 1, size=(n, 3))
    y = np.where(X[:, 0] + X[:, 1] > 1.2, 1, 0)
    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps({"id": f"r{i}", **dict(zip("abc", map(float, x)))})
                               + "\n" for i, x in enumerate(X)))
    labels = tmp_path / "labels.csv"
    labels.write_text("".join(f"r{i},{v}\n" for i, v in enumerate(y)))
    return state, records, labels


def stream(state: Path, study: str, records: Path, out: Path, labels: Path, **kw):
    with records.open() as stdin:
        return subprocess.Popen(
            [EXE, "--state", str(state), "--json", "stream", study, "--out", str(out),
             "--labels", str(labels)], stdin=stdin, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, **kw)


def score_rows(out: Path) -> list[dict[str, str]]:
    with out.open() as fh:
        return list(csv.DictReader(fh))


def test_stream_scores_every_record_and_releases_noisy_batches(participant_coordinator,
                                                                tmp_path):
    coord = participant_coordinator
    state, records, labels = setup(coord, tmp_path, "st-flow", "hosp-st-flow")
    out = tmp_path / "scores.csv"
    proc = stream(state, "st-flow", records, out, labels)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    summary = json.loads(err.strip().splitlines()[-1])
    rows = score_rows(out)
    assert [r["id"] for r in rows] == [f"r{i}" for i in range(400)]
    assert set(rows[0]) == {"id", "score_online", "score_lsh", "queried"} or \
        set(rows[0]) == {"id", "score_online", "queried"}
    queried = sum(int(r["queried"]) for r in rows)
    assert summary["queried"] == queried and summary["labelled"] == queried
    assert summary["releases"] == queried // 5 == summary["acknowledged"]
    model = coord.admin("GET", "/v1/studies/st-flow/online/model")
    assert model["version"] == summary["releases"] == summary["weights_version"]
    budget = coord.budget("hosp-st-flow")  # one epoch: (true eps_s + eps_g, delta_g)
    assert budget["epsilon_spent"] == "2" and budget["delta_spent"] == "0.000001"
    with Agent(state).ledger() as ledger:
        assert str(ledger.spent().epsilon.normalize()) == "2"
