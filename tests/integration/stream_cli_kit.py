"""``fedod-participant stream`` as a real process, for the integration tests: a study with an
online section, an enrolled participant, records and the reviewer's labels, and the scores
the stream writes."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from participant.agent import Agent

EXE = str(Path(sys.executable).with_name("fedod-participant"))
FEATURES = [{"name": n, "lo": 0.0, "hi": 1.0} for n in ("a", "b", "c")]
ONLINE = {"dim": 4, "batch": 5, "p": 0.5, "window_slots": 1000, "window_seconds": 60}
TICK = '{"tick": 1}\n'  # window 0 (in 1970) has ended: close and release it
N = 200


def setup(coord, tmp_path: Path, study: str, name: str, *, cap: str = "50", online=None,
          n: int = N) -> tuple[Path, Path, Path]:
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
    docs = [{"id": f"r{i}", "a": x[0], "b": x[1], "c": x[2]} for i, x in enumerate(X.tolist())]
    records.write_text("".join(json.dumps(d) + "\n" for d in docs) + TICK)
    labels = tmp_path / "labels.csv"
    labels.write_text("".join(f"r{i},{v}\n" for i, v in enumerate(y)))
    return state, records, labels


def stream(state: Path, study: str, records: Path, out: Path, labels: Path, **kw):
    with records.open() as stdin:
        return subprocess.Popen(
            [EXE, "--state", str(state), "--json", "stream", study, "--out", str(out),
             "--labels", str(labels), "--clock", "ticks"], stdin=stdin, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, **kw)


def score_rows(out: Path) -> list[dict[str, str]]:
    with out.open() as fh:
        return list(csv.DictReader(fh))
