"""A centring release that reaches the coordinator after its first step,
with real processes: the coordinator charges it (it observed the noisy body) without moving
the centre, so the participant's ledger and the coordinator's agree on that window."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from stream_cli_kit import FEATURES, ONLINE, stream

from participant.agent import Agent

LATE = {**ONLINE, "centre_window": 0, "step_releases": 1}


def _member(coord, tmp_path: Path, name: str, token: str) -> Path:
    state = tmp_path / name
    Agent(state).enrol(coord.url, token, coord.fingerprint(), epsilon_cap="50",
                       delta_cap="0.001", max_release_epsilon="5")
    return state


def _records(path: Path, start: int, n: int, ticks: list[int]) -> Path:
    X = np.random.default_rng(start).uniform(0, 1, size=(n, 3)).tolist()
    docs = [json.dumps({"id": f"r{start + i}", "a": x[0], "b": x[1], "c": x[2]})
            for i, x in enumerate(X)]
    path.write_text("".join(d + "\n" for d in docs)
                    + "".join(json.dumps({"tick": t}) + "\n" for t in ticks))
    return path


def _run(state: Path, records: Path, tmp_path: Path) -> dict:
    labels = tmp_path / f"{state.name}-labels.csv"
    labels.touch()
    proc = stream(state, "st-late", records, tmp_path / f"{state.name}.csv", labels)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(err.strip().splitlines()[-1])


def test_a_late_centring_release_is_charged_on_both_sides(participant_coordinator, tmp_path):
    coord = participant_coordinator
    tokens = {n: coord.new_participant(n, "50", "0.001") for n in ("late-a", "late-b")}
    coord.new_study("st-late", FEATURES, members=list(tokens), lsh={"n_tables": 10},
                    privacy={"epsilon_lsh": "1"}, online=LATE)
    a, b = (_member(coord, tmp_path, n, t) for n, t in tokens.items())
    _run(b, _records(tmp_path / "b0.jsonl", 0, 20, []), tmp_path)  # b: window 0 open, charged
    with Agent(b).ledger() as ledger:
        assert str(ledger.spent().epsilon.normalize()) == "2"
    _run(a, _records(tmp_path / "a.jsonl", 100, 20, [1, 2]), tmp_path)  # centre, then a step
    model = coord.admin("GET", "/v1/studies/st-late/online/model")
    assert (model["version"], model["centre_releases"]) == (1, 1)
    summary = _run(b, _records(tmp_path / "b1.jsonl", 200, 0, [1]), tmp_path)  # late centring
    assert summary["acknowledged"] == 1
    after = coord.admin("GET", "/v1/studies/st-late/online/model")
    assert (after["centre"], after["centre_releases"]) == (model["centre"], 1)
    entries = coord.budget("late-b")["entries"]
    assert [e["epsilon"] for e in entries] == ["2"]  # window 0, charged there too
    with Agent(b).ledger() as ledger:  # window 0 and window 1 (opened after it closed)
        assert str(ledger.spent().epsilon.normalize()) == "4"
