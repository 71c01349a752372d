"""`fedod-participant run` (the unattended round used by docker-compose) is safe to rerun."""

from __future__ import annotations

import json
import subprocess
import time
from decimal import Decimal
from pathlib import Path

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from participant_cli_kit import EXE, FEATURES, SLOT_ENV, new_study, run_cli, write_data
from secagg_http import certify_states

from participant.consortium.cli import raw_key


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


def _run_alone(coord, study: str, tmp_path: Path) -> list[str]:
    """A new study with one hospital (``hospital-<study>``) and its ``run`` arguments."""
    token = new_study(coord, study, f"hospital-{study}")
    data = tmp_path / "records.csv"
    write_data(data, n=50)
    (tmp_path / "token").write_text(token)
    return ["run", study, str(data), "--id-column", "pid", "--ignore-column", "label", "-o",
            str(tmp_path / "s.csv"), "--coordinator", coord.url, "--fingerprint",
            coord.fingerprint(), "--token-file", str(tmp_path / "token"), "--epsilon-cap", "4"]


def test_run_enrols_with_the_delta_ceiling_it_was_given(participant_coordinator, tmp_path: Path):
    """``run --max-release-delta`` reaches the enrolment, as ``enrol --max-release-delta`` does."""
    from participant.state import StateDir

    state = tmp_path / "state"
    run_cli(state, *_run_alone(participant_coordinator, "ceiling", tmp_path),
            "--max-release-delta", "1e-9", "--json")

    assert StateDir(state).load_enrolment().max_release_delta == "0.000000001"


def test_run_gives_up_waiting_with_exit_6(participant_coordinator, tmp_path: Path):
    proc = run_cli(tmp_path / "state", *_run_alone(participant_coordinator, "lonely", tmp_path),
                   "--min-contributors", "2", "--wait", "1", check=False)
    assert proc.returncode == 6, proc.stderr
    assert "waited for 2" in proc.stderr


def test_run_drives_a_secure_round_unattended_and_rerun_pays_nothing(
        participant_coordinator, tmp_path: Path):
    """Three hospitals start `run` before any round exists (enrol, register identity keys,
    wait); the admin opens the round once the coordinator has all three keys (observed, not
    timed); each run takes part until the sum of LSH tables and dense grid is revealed, then
    scores. A rerun joins nothing and is charged nothing."""
    coord = participant_coordinator
    names = [f"run-sec-{i}" for i in range(3)]
    tokens = [coord.new_participant(name, "4") for name in names]
    coord.new_study("run-secure", FEATURES, members=names, lsh={"n_tables": 10},
                    grid={"bins": 3, "k": 5}, privacy={"epsilon_lsh": "1", "epsilon_grid": "0.5"},
                    aggregation={"mode": "secure", "cohort_size": 3, "max_colluders": 1})
    (tmp_path / "fingerprint").write_text(coord.fingerprint())
    consortium = Ed25519PrivateKey.generate()

    def args(i: int) -> list[str]:
        (tmp_path / f"token{i}").write_text(tokens[i])
        write_data(tmp_path / f"records{i}.csv", n=120 + 40 * i, seed=i)
        return [EXE, "--state", str(tmp_path / f"state{i}"), "--no-progress", "run",
                "run-secure", str(tmp_path / f"records{i}.csv"), "--id-column", "pid",
                "--ignore-column", "label", "-o", str(tmp_path / f"scores{i}.csv"),
                "--coordinator", coord.url, "--fingerprint-file", str(tmp_path / "fingerprint"),
                "--token-file", str(tmp_path / f"token{i}"), "--epsilon-cap", "4",
                "--min-contributors", "3", "--json", "--consortium-key",
                raw_key(consortium.public_key())]

    commands = [args(i) for i in range(3)]
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=SLOT_ENV) for c in commands]
    try:
        headers = {"Authorization": f"Bearer {coord.admin_token}"}
        deadline = time.monotonic() + 120  # a hang guard only: the loop waits on progress
        states = {n: tmp_path / f"state{i}" for i, n in enumerate(names)}
        while not all((s / "identity_key.pem").exists() for s in states.values()):
            assert time.monotonic() < deadline, "no identity keys"
            time.sleep(0.1)  # the DPO certifies the keys each hospital sends it
        coord.admin("PUT", "/v1/studies/run-secure/membership", json=certify_states(
            consortium, "run-secure", {"mode": "secure", "cohort_size": 3,
                                       "max_colluders": 1}, states))
        while True:  # 409 until every hospital's run has registered its identity key
            opened = httpx.post(f"{coord.url}/v1/studies/run-secure/rounds", headers=headers,
                                timeout=30)
            if opened.status_code == 201 or time.monotonic() > deadline:
                break
            assert opened.status_code == 409 and "identity keys" in opened.json()["detail"]
            time.sleep(0.1)
        assert opened.status_code == 201, opened.text
        docs = []
        for proc in procs:
            out, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, err
            docs.append(json.loads(out))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [d["released_now"] for d in docs] == [True] * 3
    assert [d["rows"] for d in docs] == [120, 160, 200]
    assert all(d["contributors"] == 3 and d["model_version"] == 1 for d in docs)
    assert all((tmp_path / f"scores{i}.csv").is_file() for i in range(3))
    model = coord.admin("GET", "/v1/studies/run-secure/model")
    assert model["grid"] is not None and model["contributors"] == 3
    again = subprocess.run(commands[0], capture_output=True, text=True, timeout=120, env=SLOT_ENV)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["released_now"] is False
    assert [coord.budget(n)["epsilon_spent"] for n in names] == ["1.5"] * 3
    assert [r["status"] for r in coord.admin("GET", "/v1/studies/run-secure/rounds")] == ["done"]
