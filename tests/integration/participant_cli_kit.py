"""The participant's command line as a real process, for the integration tests: the installed
console script, a study with four features, a data file with planted outliers, a short send
slot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

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
