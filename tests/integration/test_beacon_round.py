"""A beacon study with real processes: a real ``fedod-coordinator serve``, two real
``fedod-participant round`` members, the real ``fedod-consortium beacon --once``, and the
other 38 members of an n = 40 cohort (D = 4, T = 2: a sparse masking graph, k = 4, so it needs
the beacon) driven in process over HTTP with the pure protocol functions
(tests/secagg_http.py): 40 participant processes would only queue for two shared cores.

Every step waits on observed progress (the round's phase and counts), never on a timer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from secagg_honest import honest_vector
from secagg_http import Env, Hospital, Member

from common.secagg.membership import MembershipBody, sign_membership
from common.study.signing import load_private_key, save_private_key
from common.wire.encoding import EncodedCounts, decode_counts
from participant.consortium.cli import raw_key

BIN = Path(sys.executable).parent
FEATURES = [{"name": f"x{i}", "lo": 0.0, "hi": 1.0} for i in range(4)]
N, D, T = 40, 4, 2
REAL = 2


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=600)  # a hang guard


def _wait_for(coord, study, predicate, what, procs):
    deadline = time.monotonic() + 600  # a hang guard only: the test waits on progress
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() not in (None, 0):
                raise AssertionError(f"waiting for {what}: a member exited: "
                                     f"{proc.communicate()}")
        current = coord.admin("GET", f"/v1/studies/{study}/rounds")[-1]
        if predicate(current):
            return current
        time.sleep(0.05)
    raise AssertionError(f"never saw {what}: {coord.admin('GET', f'/v1/studies/{study}/rounds')}")


def test_a_beacon_study_runs_with_real_processes(participant_coordinator, tmp_path):
    coord, study = participant_coordinator, "beacon-int"
    names = [f"{study}-h{i:02d}" for i in range(N)]
    tokens = {n: coord.new_participant(n, "10", delta_cap="1e-9") for n in names}
    created = coord.new_study(study, FEATURES, members=names, lsh={"n_tables": 5},
                              privacy={"epsilon_lsh": "0.5"},
                              aggregation={"mode": "secure", "cohort_size": N,
                                           "max_dropouts": D, "max_colluders": T})
    consortium = Ed25519PrivateKey.generate()
    real, simulated = names[:REAL], names[REAL:]
    fingerprint = coord.fingerprint()
    rng = np.random.default_rng(11)
    for name in real:
        state, data = tmp_path / name, tmp_path / f"{name}.csv"
        (tmp_path / f"{name}.token").write_text(tokens[name])
        X = rng.uniform(0, 1, size=(120, 4))
        data.write_text("x0,x1,x2,x3\n" + "\n".join(",".join(f"{v:.5f}" for v in r)
                                                    for r in X) + "\n")
        done = _run(str(BIN / "fedod-participant"), "--state", str(state), "--no-progress",
                    "enrol", "--coordinator", coord.url, "--fingerprint", fingerprint,
                    "--token-file", str(tmp_path / f"{name}.token"), "--epsilon-cap", "10",
                    "--delta-cap", "1e-9", "--consortium-key",
                    raw_key(consortium.public_key()))
        assert done.returncode == 0, done.stdout + done.stderr
    with httpx.Client(base_url=coord.url, timeout=600) as http:
        env = Env(http, created["config"])
        env.consortium = consortium
        assert env.config.aggregation.needs_beacon
        hospitals = [Hospital(http, Member(n, tokens[n]), study,
                              honest_vector(env.config, rng)) for n in simulated]
        members = {h.e.name: h.pub for h in hospitals} | {
            n: raw_key(load_private_key(tmp_path / n / "identity_key.pem").public_key())
            for n in real}
        certificate = sign_membership(MembershipBody(
            study_id=study, version=1, expires_at=datetime.now(UTC) + timedelta(days=1),
            cohort_size=N, max_dropouts=D, max_colluders=T, members=members), consortium)
        coord.admin("PUT", f"/v1/studies/{study}/membership", json=certificate.model_dump())
        (tmp_path / "membership.json").write_text(certificate.model_dump_json())
        save_private_key(consortium, tmp_path / "consortium.pem")
        coord.admin("POST", f"/v1/studies/{study}/rounds")
        procs = [subprocess.Popen(
            [str(BIN / "fedod-participant"), "--state", str(tmp_path / n), "--no-progress",
             "round", study, str(tmp_path / f"{n}.csv"), "--json", "--send-slot", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in real]
        try:
            for h in hospitals:
                h.send("keys", h.state(), h.advert(h.state()))
            _wait_for(coord, study, lambda r: r["status"] == "beacon", "the beacon phase", procs)
            beacon = [str(BIN / "fedod-consortium"), "beacon", "--key",
                      str(tmp_path / "consortium.pem"), "--coordinator", coord.url, "--study",
                      study, "--membership", str(tmp_path / "membership.json"), "--record",
                      str(tmp_path / "record.jsonl"), "--once"]
            first = _run(*beacon)
            assert first.returncode == 0, first.stderr
            assert [s["attempt"] for s in json.loads(first.stdout)["signed"]] == [1]
            again = _run(*beacon)  # nothing waits any more: nothing is signed twice
            assert again.returncode == 0 and json.loads(again.stdout)["signed"] == []
            assert len((tmp_path / "record.jsonl").read_text().splitlines()) == 1
            for h in hospitals:
                h.send("masked", h.state(), h.masked(h.state(), env))
            _wait_for(coord, study, lambda r: r["status"] == "unmask", "every vector", procs)
            for h in hospitals:
                h.send("unmask", h.state(), h.unmask(h.state(), env))
            _wait_for(coord, study, lambda r: r["status"] == "done", "the revealed sum", procs)
            for proc in procs:
                out, err = proc.communicate(timeout=600)  # a hang guard only
                assert proc.returncode == 0, out + err
                assert json.loads(out.splitlines()[0])["cohort"] == N
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    doc = coord.admin("GET", f"/v1/studies/{study}/model")
    enc = EncodedCounts.model_validate(doc["lsh"])
    total = decode_counts(enc, expected_cells=enc.n_cells)[1]
    noisy = [np.load(next((tmp_path / n / "studies" / study / "rounds").glob("*/noisy.npy")))
             for n in real]
    np.testing.assert_array_equal(total, sum(h.noisy for h in hospitals) + sum(noisy))
    for n in real:  # c_last: the draw count each real member masked under, stored durably
        assert (tmp_path / n / "studies" / study / "beacon-draw").read_text() == "1"
    charged = {Decimal(coord.budget(n)["delta_spent"]) for n in names}
    assert charged == {env.config.aggregation.graph_delta}  # 0 here (T < t); a positive
    # bound's charge (from about 170 members): tests/common/test_secagg_graph.py
    for n in real:  # the certificate version each real member verified, kept durably
        assert (tmp_path / n / "studies" / study / "membership-version").read_text() == "1"
