"""A member waiting for a secure round that nobody opens is told who opens rounds and how."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from common.secagg.messages import b64e

EXE = str(Path(sys.executable).with_name("fedod-participant"))
FEATURES = [{"name": n, "lo": 0.0, "hi": 10.0} for n in ("a", "b")]


@pytest.mark.parametrize("open_rounds", ["admin", "when_ready"])
def test_no_open_round_says_who_opens_it(participant_coordinator, tmp_path, open_rounds):
    coord = participant_coordinator
    study, name = f"wait-{open_rounds.replace('_', '-')}", f"w-{open_rounds.replace('_', '-')}"
    token = coord.new_participant(name, "10")
    coord.new_study(study, FEATURES, members=[name], lsh={"n_tables": 5},
                    privacy={"epsilon_lsh": "1"},
                    aggregation={"mode": "secure", "cohort_size": 3,
                                 "open_rounds": open_rounds})
    (tmp_path / "token").write_text(token)
    consortium = b64e(Ed25519PrivateKey.generate().public_key().public_bytes_raw())
    state = tmp_path / "state"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([EXE, "--state", str(state), *args], capture_output=True,
                              text=True, timeout=120)

    assert cli("enrol", "--coordinator", coord.url, "--fingerprint", coord.fingerprint(),
               "--token-file", str(tmp_path / "token"), "--epsilon-cap", "5",
               "--consortium-key", consortium).returncode == 0
    data = tmp_path / "d.csv"
    data.write_text("a,b\n1,2\n")
    done = cli("round", study, str(data), "--wait", "0")
    assert done.returncode == 6, done.stderr
    assert f"no open round of '{study}'" in done.stderr
    assert f"fedod-coordinator rounds open {study}" in done.stderr
    assert "Nothing was read or charged" in done.stderr
    if open_rounds == "when_ready":
        assert "opens round 1 itself once every member certified" in done.stderr
    else:
        assert "rounds membership" in done.stderr and "when_ready" in done.stderr

