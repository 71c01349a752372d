"""Bad files do not waste budget: ``contribute`` checks the whole file locally before any
request and any charge, naming every bad column with its first bad rows; a file with no
records (0 bytes or a header only, read alike) is released with a warning said before it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXE = str(Path(sys.executable).with_name("fedod-participant"))
FEATURES = [{"name": n, "lo": 0.0, "hi": 10.0} for n in ("age", "bp", "chol")]

pytestmark = pytest.mark.slow


def cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, "--state", str(state), "--no-progress", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def enrolled(participant_coordinator, recording_proxy, tmp_path):
    """A study, a participant enrolled through the recording proxy, its config stored."""
    coord = participant_coordinator
    name = f"h-{tmp_path.name[-20:]}".replace("_", "-")
    study = f"bad-{abs(hash(tmp_path)) % 10**8}"
    token = coord.new_participant(name, "10")
    coord.new_study(study, FEATURES, members=[name], lsh={"n_tables": 10},
                    privacy={"epsilon_lsh": "1"})
    (tmp_path / "token").write_text(token)
    state = tmp_path / "state"
    done = cli(state, "enrol", "--coordinator", recording_proxy.url, "--fingerprint",
               coord.fingerprint(), "--token-file", str(tmp_path / "token"),
               "--epsilon-cap", "5")
    assert done.returncode == 0, done.stderr
    assert cli(state, "config", study).returncode == 0
    recording_proxy.requests.clear()
    return coord, recording_proxy, state, study, name


def test_a_bad_file_is_refused_before_any_request_with_every_bad_column(enrolled, tmp_path):
    coord, proxy, state, study, name = enrolled
    rows = [f"{i % 9}.5,{(i * 7) % 9}.25,{(i * 3) % 9}.75" for i in range(400)]
    rows[2] = "1.0,abc,2.0"  # bp: text, in the first chunk
    rows[350] = "1.0,2.0,"  # chol: empty, in a later chunk only
    rows[351] = "1.0,2.0,inf"
    data = tmp_path / "bad.csv"
    data.write_text("age,bp,chol\n" + "\n".join(rows) + "\n")
    for command in (["contribute", "--send-slot", "0"], ["check-data"]):
        done = cli(state, *command, study, str(data), "--chunk-rows", "100")
        assert done.returncode == 3, done.stderr
        assert "column 'bp': non-numeric values" in done.stderr and "3 ('abc')" in done.stderr
        assert "column 'chol'" in done.stderr and "351" in done.stderr and "352" in done.stderr
    contribute_requests = [r for r in proxy.requests if r[0] == "POST"]
    assert contribute_requests == []
    assert coord.budget(name)["epsilon_spent"] == "0"
    ledger = json.loads(cli(state, "ledger", "--json").stdout)
    assert ledger["entries"] == []


def test_contribute_refusal_sends_nothing_at_all(enrolled, tmp_path):
    coord, proxy, state, study, _ = enrolled
    data = tmp_path / "bad.csv"
    data.write_text("age,bp,chol\n1,2,x\n")
    done = cli(state, "contribute", study, str(data), "--send-slot", "0")
    assert done.returncode == 3
    assert "refused before anything was sent or charged" in done.stderr
    assert proxy.requests == []  # not even the config: the stored one was checked against


@pytest.mark.parametrize("content", ["", "age,bp,chol\n"], ids=["0 bytes", "header only"])
def test_a_file_without_records_is_warned_about_before_its_release(enrolled, tmp_path,
                                                                  content):
    coord, proxy, state, study, name = enrolled
    data = tmp_path / "empty.csv"
    data.write_text(content)
    checked = cli(state, "check-data", study, str(data))
    assert checked.returncode == 0 and "holds 0 records" in checked.stderr
    done = cli(state, "contribute", study, str(data), "--send-slot", "0")
    assert done.returncode == 0, done.stderr
    warning = done.stderr.index("holds 0 records")
    assert "noise only" in done.stderr and "costs (epsilon=1, delta=0)" in done.stderr
    assert warning < done.stderr.index("sent release")  # said before the release
    assert coord.budget(name)["epsilon_spent"] == "1"
    assert "rows over --rows-per-id" not in done.stdout


def test_without_a_stored_config_the_check_runs_after_the_fetch(participant_coordinator,
                                                               tmp_path):
    """A state directory that never fetched the study's config checks the file against the
    fetched one, still before any charge: refused, nothing released."""
    coord = participant_coordinator
    token = coord.new_participant("h-fresh", "10")
    coord.new_study("bad-fresh", FEATURES, members=["h-fresh"], lsh={"n_tables": 10},
                    privacy={"epsilon_lsh": "1"})
    (tmp_path / "token").write_text(token)
    state = tmp_path / "state"
    assert cli(state, "enrol", "--coordinator", coord.url, "--fingerprint", coord.fingerprint(),
               "--token-file", str(tmp_path / "token"), "--epsilon-cap", "5").returncode == 0
    data = tmp_path / "bad.csv"
    data.write_text("age,bp,chol\n1,2,3\n1,,3\n")
    done = cli(state, "contribute", "bad-fresh", str(data), "--send-slot", "0")
    assert done.returncode == 3 and "column 'bp': missing values" in done.stderr
    assert coord.budget("h-fresh")["epsilon_spent"] == "0"
    assert json.loads(cli(state, "ledger", "--json").stdout)["entries"] == []
