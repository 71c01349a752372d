"""A wrong coordinator address at enrolment is a configuration error (exit 2) said at once,
not an outage retried six times and reported as 'nothing is lost, run the command again'."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

EXE = str(Path(sys.executable).with_name("fedod-participant"))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens


@pytest.mark.parametrize("kind", ["refused", "unknown host", "https against http",
                                  "not a coordinator"])
def test_a_wrong_address_is_a_configuration_error(participant_coordinator, tmp_path, kind):
    http = participant_coordinator.url
    url = {
        "refused": f"http://127.0.0.1:{_closed_port()}",
        "unknown host": "http://coordinator.invalid:8000",
        "https against http": http.replace("http://", "https://"),
        "not a coordinator": http + "/somewhere-else",
    }[kind]
    (tmp_path / "token").write_text("t" * 43)
    done = subprocess.run(
        [EXE, "--state", str(tmp_path / "state"), "enrol", "--coordinator", url,
         "--fingerprint", "sha256:" + "0" * 64, "--token-file", str(tmp_path / "token"),
         "--epsilon-cap", "1", "--max-tries", "50"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Check --coordinator" in done.stderr or "check --coordinator" in done.stderr
    assert "nothing was stored" in done.stderr
    assert "run the command again later" not in done.stderr and "tries" not in done.stderr
    expected = {"refused": "connection refused", "unknown host": "is unknown",
                "https against http": "does not speak https",
                "not a coordinator": "not a fedod coordinator"}[kind]
    assert expected in done.stderr
    assert not (tmp_path / "state" / "participant.json").exists()
