"""`fedod-participant stream` against a real coordinator process: scores, labels, one release
per schedule window (the clock driven by ticks in the input), the online model, a kill and
restart, and a cap reached mid-stream."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
from stream_cli_kit import EXE, FEATURES, ONLINE, TICK, N, score_rows, setup, stream

from participant.agent import Agent


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
    assert [r["id"] for r in rows] == [f"r{i}" for i in range(N)]
    assert set(rows[0]) == {"id", "score_online", "score_lsh", "queried"} or \
        set(rows[0]) == {"id", "score_online", "queried"}
    queried = sum(int(r["queried"]) for r in rows)
    assert summary["queried"] == queried and summary["labelled"] == queried
    assert summary["releases"] == 1 == summary["acknowledged"] and summary["window"] == 1
    model = coord.admin("GET", "/v1/studies/st-flow/online/model")
    assert model["version"] == 1 == summary["weights_version"]
    budget = coord.budget("hosp-st-flow")  # window 0: (true eps_s + eps_g, delta_g)
    assert budget["epsilon_spent"] == "2" and budget["delta_spent"] == "0.000001"
    with Agent(state).ledger() as ledger:  # and window 1, opened (charged) after it
        assert str(ledger.spent().epsilon.normalize()) == "4"


def count_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_kill_and_restart_mid_stream_respends_nothing_and_skips_nothing(
    participant_coordinator, tmp_path
):
    coord = participant_coordinator
    state, records, labels = setup(coord, tmp_path, "st-kill", "hosp-st-kill")
    out = tmp_path / "scores.csv"
    proc = subprocess.Popen([EXE, "--state", str(state), "stream", "st-kill", "--out", str(out),
                             "--labels", str(labels), "--clock", "ticks"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdin is not None
    proc.stdin.write("".join(records.read_text().splitlines(keepends=True)[:100]))
    proc.stdin.flush()  # only 100 of the 200 records ever reach this run
    while proc.poll() is None and count_lines(out) < 80:  # observed progress: 79 scored
        time.sleep(0.01)  # poll interval only
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    killed_at = count_lines(out)
    assert 80 <= killed_at <= 101, "the stream must be killed mid-stream"
    releases_before = coord.admin("GET", "/v1/studies/st-kill/online/model")["version"]

    again = stream(state, "st-kill", records, out, labels)  # the same input, replayed
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    summary = json.loads(err.strip().splitlines()[-1])
    rows = score_rows(out)
    assert [r["id"] for r in rows] == [f"r{i}" for i in range(N)]  # each once, in order
    queried = sum(int(r["queried"]) for r in rows)
    assert summary["records"] == N and summary["queried"] == queried
    assert summary["labelled"] == queried  # every queried record used once
    assert summary["releases"] == 1 == summary["acknowledged"] and releases_before == 0
    model = coord.admin("GET", "/v1/studies/st-kill/online/model")
    assert model["version"] == 1
    budget = coord.budget("hosp-st-kill")
    assert budget["epsilon_spent"] == "2"  # window 0, charged once across the restart
    with Agent(state).ledger() as ledger:  # plus window 1, opened after window 0 closed
        assert str(ledger.spent().epsilon.normalize()) == "4"


def test_cap_reached_mid_stream_stops_before_deciding_or_noising(participant_coordinator,
                                                                  tmp_path):
    coord = participant_coordinator
    state, records, labels = setup(coord, tmp_path, "st-cap", "hosp-st-cap", cap="3")
    lines = records.read_text().splitlines(keepends=True)
    records.write_text("".join(lines[:70]) + TICK + "".join(lines[70:N]))  # r70.. in window 1
    out = tmp_path / "scores.csv"
    proc = stream(state, "st-cap", records, out, labels)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 8, err
    assert "privacy cap reached: schedule window 1" in err
    assert "before deciding or noising" in err
    assert re.search(r"does not fit (your local|the coordinator's) cap", err)  # which one
    assert "a stream needs an epsilon and a delta cap on both ledgers" in err
    assert "raise-cap NAME --epsilon-cap E --delta-cap D" in err and "enrol" in err
    rows = score_rows(out)
    assert [r["id"] for r in rows] == [f"r{i}" for i in range(70)]  # window 0 only
    import sqlite3

    with sqlite3.connect(state / "studies" / "st-cap" / "stream.sqlite3") as db:
        assert db.execute("SELECT MAX(seq) FROM records").fetchone()[0] == 69
        stored = db.execute("SELECT COUNT(*) FROM releases").fetchone()[0]
    assert stored == 1  # window 0's release; nothing of window 1 was noised
    model = coord.admin("GET", "/v1/studies/st-cap/online/model")
    assert model["version"] == 1
    assert coord.budget("hosp-st-cap")["epsilon_spent"] == "2"
    with Agent(state).ledger() as ledger:
        assert str(ledger.spent().epsilon.normalize()) == "2"

    again = stream(state, "st-cap", records, out, labels)  # a restart stops at once
    _, err = again.communicate(timeout=120)
    assert again.returncode == 8, err
    assert len(score_rows(out)) == 70


def test_coordinator_refuses_bad_gradient_releases_and_replays_identical_ones(
    participant_coordinator,
):
    import httpx

    from common.online.params import OnlineParams
    from common.online.wire import encode_vector

    coord = participant_coordinator
    token = coord.new_participant("hosp-st-wire", "5", "0.001")
    study = coord.new_study("st-wire", FEATURES, members=["hosp-st-wire"], lsh={"n_tables": 5},
                            privacy={"epsilon_lsh": "1"}, online=ONLINE)
    signed = study["config"]
    from common.study.signing import SignedConfig

    digest = SignedConfig.model_validate(signed).digest()
    cost = OnlineParams(**ONLINE).epoch_cost()
    body = {"idempotency_key": "k" * 20, "config_version": 1, "config_digest": digest,
            "weights_version": 0, "window": 0, "count": 3,
            "noisy_sum": encode_vector(np.ones(4)), "epsilon": str(cost.epsilon),
            "delta": str(cost.delta)}
    url = f"{coord.url}/v1/studies/st-wire/online/gradients"
    headers = {"Authorization": f"Bearer {token}"}

    def post(doc):
        return httpx.post(url, json=doc, headers=headers, timeout=30)

    assert post({**body, "epsilon": "1"}).status_code == 422  # not one window's charge
    assert post({**body, "noisy_sum": encode_vector(np.ones(3))}).status_code == 422
    assert post({**body, "config_version": 2}).status_code == 409
    assert post({**body, "window": 10**8}).status_code == 422  # that window has not ended
    first = post(body)
    assert first.status_code == 201 and first.json()["model_version"] == 1
    assert post(body).status_code == 200  # replay: same answer, no second charge
    assert post({**body, "count": 4}).status_code == 409  # same key, other body
    again = post({**body, "idempotency_key": "m" * 20})  # a second release for window 0
    assert again.status_code == 409 and "window" in again.text
    second = post({**body, "idempotency_key": "m" * 20, "window": 1})
    assert second.status_code == 201 and second.json()["model_version"] == 2
    budget = coord.budget("hosp-st-wire")
    assert budget["epsilon_spent"] == str((cost.epsilon * 2).normalize())
    over = post({**body, "idempotency_key": "n" * 20, "window": 2})  # 6 > the cap of 5
    assert over.status_code == 409 and "budget" in over.text.lower()
    model = httpx.get(f"{coord.url}/v1/studies/st-wire/online/model", headers=headers,
                      timeout=30).json()
    assert model["version"] == 2 and model["pending"] == 0


def test_watch_reads_files_as_they_appear_and_csv_too(participant_coordinator, tmp_path):
    coord = participant_coordinator
    state, records, labels = setup(coord, tmp_path, "st-watch", "hosp-st-watch", n=60)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    lines = records.read_text().splitlines(keepends=True)[:60]  # the records, not the tick
    (inbox / "a.jsonl").write_text("".join(lines[:30]))
    docs = [json.loads(line) for line in lines[30:]]
    (inbox / "b.csv").write_text("id,a,b,c\n" + "".join(
        f"{d['id']},{d['a']},{d['b']},{d['c']}\n" for d in docs))
    (inbox / ".c.jsonl").write_text(lines[0])  # still being written: ignored
    out = tmp_path / "scores.csv"
    done = subprocess.run([EXE, "--state", str(state), "--json", "stream", "st-watch",
                           "--watch", str(inbox), "--once", "--out", str(out), "--labels",
                           str(labels)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert [r["id"] for r in score_rows(out)] == [f"r{i}" for i in range(60)]
