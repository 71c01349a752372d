"""`fedod-participant run` (the unattended round used by docker-compose) is safe to rerun."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

from test_participant_flow import new_study, run_cli, write_data


def test_run_releases_once_and_rerun_pays_nothing(participant_coordinator, tmp_path: Path):
    coord = participant_coordinator
    token = new_study(coord, "unattended", "hospital-run")
    data, state, out = tmp_path / "records.csv", tmp_path / "state", tmp_path / "scores.csv"
    write_data(data, n=300)
    (tmp_path / "token").write_text(token)
    (tmp_path / "fingerprint").write_text(coord.fingerprint())
    args = ["run", "unattended", str(data), "--id-column", "pid", "--ignore-column", "label",
            "-o", str(out), "--coordinator", coord.url, "--fingerprint-file",
            str(tmp_path / "fingerprint"), "--token-file", str(tmp_path / "token"),
            "--epsilon-cap", "4", "--json"]

    first = json.loads(run_cli(state, *args).stdout)
    second = json.loads(run_cli(state, *args).stdout)

    assert first["released_now"] is True and second["released_now"] is False
    assert first["rows"] == second["rows"] == 300 and out.is_file()
    budget = coord.budget("hospital-run")
    assert len(budget["entries"]) == 1 and budget["epsilon_spent"] == "1.5"
    assert Decimal(first["epsilon_spent"]) == Decimal(second["epsilon_spent"]) == Decimal("1.5")


def test_run_gives_up_waiting_with_exit_6(participant_coordinator, tmp_path: Path):
    coord = participant_coordinator
    token = new_study(coord, "lonely", "hospital-lonely")
    data, state = tmp_path / "records.csv", tmp_path / "state"
    write_data(data, n=50)
    (tmp_path / "token").write_text(token)
    proc = run_cli(state, "run", "lonely", str(data), "--id-column", "pid", "--ignore-column",
                   "label", "-o", str(tmp_path / "s.csv"), "--coordinator", coord.url,
                   "--fingerprint", coord.fingerprint(), "--token-file", str(tmp_path / "token"),
                   "--epsilon-cap", "4", "--min-contributors", "2", "--wait", "1", check=False)
    assert proc.returncode == 6, proc.stderr
    assert "waited for 2" in proc.stderr
