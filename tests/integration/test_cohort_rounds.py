"""Private cohort rounds with a real coordinator process and three real participant processes.

Everything waits on observed progress (a process exiting, a release recorded by the
coordinator), never on a timer: the admin closes the last round only once the coordinator
shows the two remaining participants' releases.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import numpy as np

from participant.layout import COHORT_MODEL

EXE = str(Path(sys.executable).with_name("fedod-participant"))
FEATURES = [{"name": f"x{i}", "lo": 0.0, "hi": 1.0} for i in range(3)]
COHORTS = {"method": "kmeans", "k": 2, "over": 4, "rounds": 3, "epsilon": "3"}
ROUND_COST = Decimal(1)
STUDY = "cohort-e2e"


def cli(state: Path, *args: str) -> list[str]:
    return [EXE, "--state", str(state), "--no-progress", *args]


def run(cmd: list[str]) -> tuple[int, str, str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def cohort_charges(doc: dict) -> list[Decimal]:
    return [Decimal(e["epsilon"]) for e in doc["entries"] if e["kind"] == "cohort"]


def local_charges(state: Path) -> list[Decimal]:
    code, out, err = run(cli(state, "ledger", "--json"))
    assert code == 0, err
    return [Decimal(e["epsilon"]) for e in json.loads(out)["entries"]
            if e["key"].startswith("cohort-")]


def enrol(coord, tmp_path: Path, name: str, url: str, cap: str = "10") -> Path:
    state, token = tmp_path / name, tmp_path / f"{name}.token"
    token.write_text(coord.new_participant(name, "10"))
    code, _, err = run(cli(state, "enrol", "--coordinator", url, "--fingerprint",
                           coord.fingerprint(), "--token-file", str(token), "--epsilon-cap", cap))
    assert code == 0, err
    return state


def write_blobs(path: Path, rng: np.random.Generator) -> None:
    X = np.clip(np.vstack([rng.normal(0.25, 0.03, (150, 3)), rng.normal(0.75, 0.03, (150, 3))]),
                0, 1)
    path.write_text("x0,x1,x2\n" + "\n".join(",".join(f"{v:.5f}" for v in r) for r in X) + "\n")


def stop(procs: dict[str, subprocess.Popen]) -> None:
    """Kill the processes a failed assertion left running (our own, by handle)."""
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def wait_for(coord, predicate, what: str, study: str = STUDY) -> dict:
    deadline = time.monotonic() + 900  # a hang guard only: the test waits on progress
    while time.monotonic() < deadline:
        doc = coord.admin("GET", f"/v1/studies/{study}/cohorts")
        if predicate(doc):
            return doc
        time.sleep(0.1)
    raise AssertionError(f"never saw {what}: {doc}")


def test_three_participants_run_every_round_end_to_end(participant_coordinator,
                                                       recording_proxy, tmp_path):
    coord = participant_coordinator
    names = ["ch0", "ch1", "ch2"]
    states = {n: enrol(coord, tmp_path, n, recording_proxy.url if n == "ch0" else coord.url,
                       cap="2.5" if n == "ch2" else "10")  # ch0 recorded; ch2 pays 2 of 3
              for n in names}
    coord.new_study(STUDY, FEATURES, members=names, lsh={"n_tables": 5},
                    privacy={"epsilon_lsh": "0.5"}, cohorts=COHORTS)
    rng = np.random.default_rng(11)
    data = {n: tmp_path / f"{n}.csv" for n in names}
    for path in data.values():
        write_blobs(path, rng)
    coord.admin("POST", f"/v1/studies/{STUDY}/cohorts")

    # ch0 draws round 1 and leaves before sending: charged locally, nothing sent
    code, out, err = run(cli(states["ch0"], "cohorts", STUDY, str(data["ch0"]), "--json",
                             "--stop-after", "drawn"))
    assert code == 0 and json.loads(out) == {"stopped_after": "drawn", "round": 1}, err
    stored = (states["ch0"] / "studies" / STUDY / "cohorts" / "round-1.json").read_bytes()
    assert local_charges(states["ch0"]) == [ROUND_COST]
    assert cohort_charges(coord.budget("ch0")) == []
    assert recording_proxy.bodies("/cohorts/rounds/") == []

    procs = {n: subprocess.Popen(cli(states[n], "cohorts", STUDY, str(data[n]), "--json",
                                     "--send-slot", "0.2"),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in names}
    try:
        # ch2's local cap cannot pay round 3: refused before any noise is drawn (exit 5)
        out, err = procs["ch2"].communicate(timeout=300)
        assert procs["ch2"].returncode == 5, out + err
        assert "local cap" in err and "no noise was drawn" in err
        folder = states["ch2"] / "studies" / STUDY / "cohorts"
        assert sorted(p.name for p in folder.iterdir()) == ["round-1.json", "round-2.json"]
        doc = wait_for(coord, lambda d: d.get("round") == 3
                       and d["history"][2]["sent"] == ["ch0", "ch1"], "ch0, ch1 in round 3")
        assert doc["history"][2]["expected"] == names
        coord.admin("POST", f"/v1/studies/{STUDY}/cohorts/rounds/3/close")
        results = {}
        for n in ("ch0", "ch1"):
            out, err = procs[n].communicate(timeout=300)
            assert procs[n].returncode == 0, out + err
            results[n] = json.loads(out)
    finally:
        stop(procs)

    # the retried round re-sent the stored bytes exactly
    assert recording_proxy.bodies("/cohorts/rounds/1")[0] == stored
    assert results["ch0"]["sent"] == [1, 2, 3] and results["ch1"]["sent"] == [1, 2, 3]
    # ledgers exact on both sides over the rounds
    for n, paid in (("ch0", 3), ("ch1", 3), ("ch2", 2)):
        assert cohort_charges(coord.budget(n)) == [ROUND_COST] * paid, n
        assert local_charges(states[n]) == [ROUND_COST] * paid, n
    # both print the same released cohorts, from the model alone
    cohorts = results["ch0"]["cohorts"]
    assert cohorts == results["ch1"]["cohorts"] and len(cohorts) == 2
    assert abs(sum(c["size"] for c in cohorts) - 600) < 150  # round 3: ch0 and ch1 only
    final = coord.admin("GET", f"/v1/studies/{STUDY}/cohorts")
    assert final["status"] == "done" and "missing: ch2" in final["history"][2]["detail"]
    # two real blobs of 300 records each: neither cohort is marked as noise or unmoved
    assert [(c["marks"], c["note"]) for c in cohorts] == [([], "")] * 2
    # ch1's score file carries each record's released cohort and its distance to the centre
    code, _, err = run(cli(states["ch1"], "contribute", STUDY, str(data["ch1"]),
                           "--send-slot", "0"))  # the LSH model the score file also needs
    assert code == 0, err
    out = tmp_path / "ch1-scores.csv"
    code, _, err = run(cli(states["ch1"], "score", STUDY, str(data["ch1"]), "-o", str(out)))
    assert code == 0, err
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    X = np.loadtxt(data["ch1"], delimiter=",", skiprows=1)
    centres = {c["cohort"]: np.array(list(c["centre"].values())) for c in cohorts}
    for x, row in zip(X, rows, strict=True):  # the box is [0, 1]^3: unit = feature units
        dist = {i: float(np.linalg.norm(x - c)) for i, c in centres.items()}
        assert int(row["cohort"]) == min(dist, key=dist.get)
        assert abs(float(row["cohort_distance"]) - min(dist.values())) < 1e-9
    # the released cohort model also scores as the third detector of the combined score
    from common.cohorts.model import CohortModel
    from common.detectors import CentroidDetector

    model = CohortModel.from_json((states["ch1"] / "studies" / STUDY / COHORT_MODEL).read_text())
    expected = CentroidDetector.from_model(model).decision_function(X)
    np.testing.assert_allclose([float(r["score_centroid"]) for r in rows], expected, rtol=1e-9)


def test_a_dpm_tree_through_real_processes_prints_rules(participant_coordinator, tmp_path):
    """Method dpm plugs into the same rounds: two processes run every level and the leaf
    round, print the same cohorts with rule paths, and both ledgers agree exactly."""
    coord, study, names = participant_coordinator, "cohort-dpm", ["dh0", "dh1"]
    states = {n: enrol(coord, tmp_path, n, coord.url) for n in names}
    coord.new_study(study, FEATURES, members=names, lsh={"n_tables": 5},
                    privacy={"epsilon_lsh": "0.5"},
                    cohorts={"method": "dpm", "epsilon": "4", "depth": 2, "bins": 8})
    rng = np.random.default_rng(12)
    data = {n: tmp_path / f"{n}.csv" for n in names}
    for path in data.values():
        write_blobs(path, rng)
    coord.admin("POST", f"/v1/studies/{study}/cohorts")
    # dh0 crashed earlier between reserving round 1 and storing its vector: the reservation
    # is still 'intended'; the round is drawn under that one charge (the exact-ledger check)
    from common.budget import PrivacyBudget
    from participant.release.ledger import Ledger
    from participant.state import StateDir

    with Ledger(StateDir(states["dh0"]).ledger_path) as ledger:
        ledger.reserve(idempotency_key=f"cohort-{study}-1", study=study, config_version=1,
                       config_digest="", cost=PrivacyBudget("1.2"), cap=PrivacyBudget("10"))
    procs = {n: subprocess.Popen(cli(states[n], "cohorts", study, str(data[n]), "--json",
                                     "--send-slot", "0.2"),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in names}
    results = {}
    try:
        for n, proc in procs.items():
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, out + err
            results[n] = json.loads(out)
    finally:
        stop(procs)
    cohorts = results["dh0"]["cohorts"]
    assert cohorts == results["dh1"]["cohorts"] and results["dh0"]["method"] == "dpm"
    assert all(c["rule"] for c in cohorts) and len(cohorts) >= 2
    rounds = len(coord.admin("GET", f"/v1/studies/{study}/cohorts")["history"])
    assert results["dh0"]["sent"] == list(range(1, rounds + 1))
    for n in names:
        there = cohort_charges(coord.budget(n))
        assert there == local_charges(states[n]) and len(there) == rounds
        assert sum(there) <= Decimal(4)
