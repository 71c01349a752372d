"""A lost answer or a killed agent never costs twice: same bytes, one contribution, one charge."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from participant.agent import Agent, DataOptions

EXE = str(Path(sys.executable).with_name("fedod-participant"))
FEATURES = [{"name": n, "lo": 0.0, "hi": 1.0} for n in ("a", "b", "c")]


def setup(coord, tmp_path: Path, study: str, name: str) -> tuple[str, Path]:
    token = coord.new_participant(name, "50")
    coord.new_study(study, FEATURES, members=[name], lsh={"n_tables": 20},
                    grid={"bins": 3, "k": 5}, privacy={"epsilon_lsh": "1", "epsilon_grid": "1"})
    data = tmp_path / "d.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    X = np.random.default_rng(3).uniform(0, 1, size=(500, 3))
    pq.write_table(pa.table({n["name"]: X[:, i] for i, n in enumerate(FEATURES)}), data)
    return token, data


def test_agent_killed_before_the_answer_resends_identical_bytes(
    participant_coordinator, recording_proxy, tmp_path
):
    coord, proxy = participant_coordinator, recording_proxy
    token, data = setup(coord, tmp_path, "crash", "hospital-crash")
    state = tmp_path / "state"
    Agent(state).enrol(proxy.url, token, coord.fingerprint(), epsilon_cap="10")

    proxy.drop = lambda method, path: method == "POST"
    proxy.hold = True  # the coordinator has answered; the agent never hears it
    agent = subprocess.Popen([EXE, "--state", str(state), "--no-progress", "contribute",
                              "crash", str(data), "--send-slot", "0.2"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proxy.dropped.wait(90), agent.communicate(timeout=5)
    os.kill(agent.pid, signal.SIGKILL)
    agent.wait(timeout=30)
    proxy.release.set()
    assert coord.budget("hospital-crash")["epsilon_spent"] == "2"  # it did arrive

    proxy.drop = lambda method, path: False
    rerun = subprocess.run([EXE, "--state", str(state), "--no-progress", "--json",
                            "contribute", "crash", str(data)],
                           capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert "re-sent stored release" in rerun.stderr
    assert json.loads(rerun.stdout)["sent"][0]["resent"] is True

    posts = proxy.bodies("/contributions")
    assert len(posts) == 2 and posts[0] == posts[1]
    outbox = list((state / "outbox").iterdir())
    assert len(outbox) == 1 and outbox[0].read_bytes() == posts[0]
    budget = coord.budget("hospital-crash")
    assert budget["epsilon_spent"] == "2" and len(budget["entries"]) == 1
    with Agent(state).ledger() as ledger:
        entries = ledger.entries()
        assert [e.status for e in entries] == ["acknowledged"]
        assert str(ledger.spent().epsilon.normalize()) == "2"


def test_dropped_answer_is_retried_in_the_same_run_without_new_noise(
    participant_coordinator, recording_proxy, tmp_path
):
    coord, proxy = participant_coordinator, recording_proxy
    token, data = setup(coord, tmp_path, "drop", "hospital-drop")
    seen: list[str] = []
    proxy.drop = lambda method, path: method == "POST" and not seen.append(path) and len(seen) == 1
    sleeps: list[float] = []
    agent = Agent(tmp_path / "state", sleep=sleeps.append)
    agent.enrol(proxy.url, token, coord.fingerprint(), epsilon_cap="10")
    outcome = agent.contribute("drop", data, DataOptions(), send_slot=0)
    assert len(outcome.sent) == 1 and outcome.sent[0].contribution["model_version"] >= 1
    posts = proxy.bodies("/contributions")
    assert len(posts) == 2 and posts[0] == posts[1] and len(sleeps) == 1
    budget = coord.budget("hospital-drop")
    assert budget["epsilon_spent"] == "2" and len(budget["entries"]) == 1
    assert agent.spent().epsilon == 2


def test_agent_killed_after_reserving_keeps_the_charge(
    participant_coordinator, recording_proxy, tmp_path
):
    """Killed once its release is in the ledger (while reading, or waiting for its slot): the
    release stays charged, as abandoned or re-sent, and is never refunded."""
    import sqlite3

    import pyarrow as pa
    import pyarrow.parquet as pq

    coord, proxy = participant_coordinator, recording_proxy
    token, _ = setup(coord, tmp_path, "killed", "hospital-killed")
    data = tmp_path / "big.parquet"
    X = np.random.default_rng(5).uniform(0, 1, size=(300_000, 3))
    pq.write_table(pa.table({f["name"]: X[:, i] for i, f in enumerate(FEATURES)}), data)
    state = tmp_path / "state"
    Agent(state).enrol(proxy.url, token, coord.fingerprint(), epsilon_cap="10")
    agent = subprocess.Popen([EXE, "--state", str(state), "--no-progress", "contribute",
                              "killed", str(data), "--send-slot", "600"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ledger_file = state / "ledger.sqlite3"
    while agent.poll() is None:  # observed progress: the reservation is committed
        with sqlite3.connect(ledger_file) as db:
            if db.execute("SELECT COUNT(*) FROM releases").fetchone()[0]:
                break
        time.sleep(0.01)  # poll interval only; nothing depends on its length
    os.kill(agent.pid, signal.SIGKILL)
    agent.wait(timeout=30)
    assert proxy.bodies("/contributions") == []  # the slot had not ended

    with Agent(state).ledger() as ledger:
        (killed,) = ledger.entries()
    rerun = subprocess.run([EXE, "--state", str(state), "--no-progress", "contribute",
                            "killed", str(data), "--send-slot", "0"],
                           capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    with Agent(state).ledger() as ledger:
        status = {e.idempotency_key: e.status for e in ledger.entries()}
        assert status[killed.idempotency_key] in ("abandoned", "acknowledged")
        assert ledger.spent().epsilon == 2 * len(status)  # every release charged, none refunded
    assert not list((state / "outbox").glob(".*.tmp"))
