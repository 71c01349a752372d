"""Secure aggregation with real participant processes and a real coordinator process.

Dropouts are triggered on observed progress: a participant is SIGKILLed once the coordinator
has recorded its masked vector, or started with ``--stop-after`` so that it leaves right after
the coordinator accepted that message; the test waits for the coordinator to record the
others' messages before it declares the lost ones (``advance``). Nothing depends on a timer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from secagg_http import certify_states

from common.wire.encoding import decode_counts
from participant.cli.main import EXIT_CONFIG
from participant.consortium.cli import raw_key

EXE = str(Path(sys.executable).with_name("fedod-participant"))
FEATURES = [{"name": f"x{i}", "lo": 0.0, "hi": 1.0} for i in range(4)]
SECURE = {"mode": "secure", "cohort_size": 4, "max_dropouts": 1, "max_colluders": 1}
ENROL_AT_ONCE = 5
PATIENCE = 1500  # --wait: a member waits out a coordinator this busy (a hang guard, no timer
# decides an outcome): fifty members and their coordinator share two loaded cores here


def cli(state: Path, *args: str) -> list[str]:
    return [EXE, "--state", str(state), "--no-progress", *args]


class Cohort:
    def __init__(self, coord, tmp_path: Path, study: str, n: int = 4, aggregation=SECURE,
                 **spec) -> None:
        self.coord, self.study = coord, study
        self.names = [f"{study}-h{i}" for i in range(n)]
        tokens = [coord.new_participant(name, "10") for name in self.names]
        spec = {"privacy": {"epsilon_lsh": "0.5"}, **spec}
        coord.new_study(study, FEATURES, members=self.names, lsh={"n_tables": 10},
                        aggregation=aggregation, **spec)
        self.states, self.data = {}, {}
        rng = np.random.default_rng(abs(hash(study)) % 2**32)
        self.consortium = Ed25519PrivateKey.generate()
        fingerprint = coord.fingerprint()  # once, before any member process loads the machine
        enrolling = []
        for name, token in zip(self.names, tokens, strict=True):
            state, data = tmp_path / name, tmp_path / f"{name}.csv"
            (tmp_path / f"{name}.token").write_text(token)
            X = rng.uniform(0, 1, size=(int(rng.integers(80, 200)), 4))
            data.write_text("x0,x1,x2,x3\n" + "\n".join(",".join(f"{v:.5f}" for v in r)
                                                        for r in X) + "\n")
            enrolling.append(cli(state, "enrol", "--coordinator", coord.url, "--fingerprint",
                                 fingerprint, "--token-file", str(tmp_path / f"{name}.token"),
                                 "--epsilon-cap", "10", "--consortium-key",
                                 raw_key(self.consortium.public_key())))
            self.states[name], self.data[name] = state, data
        # A few enrolments at a time: fifty Python processes starting at once on two shared
        # cores would only queue for the CPU (each waits for its own exit; no timer decides).
        for first in range(0, len(enrolling), ENROL_AT_ONCE):
            procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                     for args in enrolling[first:first + ENROL_AT_ONCE]]
            for proc in procs:
                out, _ = proc.communicate(timeout=900)  # a hang guard only
                assert proc.returncode == 0, out
        coord.admin("PUT", f"/v1/studies/{study}/membership",
                    json=certify_states(self.consortium, study, aggregation, self.states))
        coord.admin("POST", f"/v1/studies/{study}/rounds")
        self.procs: dict[str, subprocess.Popen] = {}
        self.killed: set[str] = set()

    def start(self, name: str, *extra: str) -> None:
        self.procs[name] = subprocess.Popen(
            cli(self.states[name], "round", self.study, str(self.data[name]), "--json",
                "--send-slot", "0", "--wait", str(PATIENCE), *extra),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def kill(self, name: str) -> None:
        self.killed.add(name)
        self.procs[name].kill()
        self.procs[name].wait()

    def failed(self) -> str | None:
        """The output of a member process that exited with an error (not one the test
        killed): a round cannot finish without it, so waiting on would only hang."""
        for name, proc in self.procs.items():
            if name not in self.killed and proc.poll() not in (None, 0):
                out, err = proc.communicate()
                return f"{name} exited with {proc.returncode}: {out}{err}"
        return None

    def finish(self, name: str) -> tuple[int, str]:
        out, err = self.procs[name].communicate(timeout=PATIENCE)  # a hang guard only
        return self.procs[name].returncode, out + err

    def rounds(self) -> list[dict]:
        return self.coord.admin("GET", f"/v1/studies/{self.study}/rounds")

    def wait_for(self, predicate, what: str) -> dict:
        deadline = time.monotonic() + PATIENCE  # a hang guard only: it waits on progress
        while time.monotonic() < deadline:
            if (why := self.failed()) is not None:
                raise AssertionError(f"waiting for {what}: {why}")
            try:
                current = self.rounds()[-1]
            except httpx.HTTPStatusError as exc:  # 503: busy, retry later (by design)
                if exc.response.status_code != 503:
                    raise
                continue
            except httpx.TimeoutException:  # a saturated coordinator: ask again
                continue
            if predicate(current):
                return current
            time.sleep(0.1)
        log = self.coord.log.read_text(errors="replace")[-4000:]
        raise AssertionError(f"never saw {what}: {self.rounds()}\ncoordinator log:\n{log}")

    def noisy(self, name: str) -> np.ndarray:
        files = list((self.states[name] / "studies" / self.study / "rounds").glob("*/noisy.npy"))
        assert len(files) == 1
        return np.load(files[0])

    def model(self, part: str = "lsh") -> tuple[dict, np.ndarray]:
        doc = self.coord.admin("GET", f"/v1/studies/{self.study}/model")
        from common.wire.encoding import EncodedCounts

        enc = EncodedCounts.model_validate(doc[part])
        return doc, decode_counts(enc, expected_cells=enc.n_cells)[1]

    def spent(self, name: str) -> str:
        return self.coord.budget(name)["epsilon_spent"]


def cohorts(coord, tmp_path):
    made = []

    def make(study: str, **spec) -> Cohort:
        made.append(Cohort(coord, tmp_path, study, **spec))
        return made[-1]

    yield make
    for c in made:
        for proc in c.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def cohort(participant_coordinator, tmp_path):
    yield from cohorts(participant_coordinator, tmp_path)


@pytest.fixture
def big_cohort(own_participant_coordinator, tmp_path):
    """A cohort on a coordinator of its own: fifty members' polling cannot spill over."""
    yield from cohorts(own_participant_coordinator, tmp_path)


def test_member_killed_after_masking_is_recovered_and_a_restart_resumes(cohort):
    """SIGKILL a member once the coordinator holds its masked vector; the admin declares it
    lost, and the others then send their shares of its self-mask seed (recover phase). A
    member that left after its keys resumes from its state directory (same round keys, so the
    roster still carries its advert). The study releases a dense grid beside the LSH tables:
    both parts of the sum reach the model."""
    c = cohort("sa-after", grid={"bins": 3},
               privacy={"epsilon_lsh": "0.5", "epsilon_grid": "0.25"})
    late, victim = c.names[3], c.names[0]
    c.start(late, "--stop-after", "keys")
    assert c.finish(late)[0] == 0
    for name in c.names[:3]:
        c.start(name)
    c.wait_for(lambda r: r["status"] == "masking" and r["masked"] == 3, "3 masked vectors")
    c.kill(victim)  # its vector is recorded; it never answers the unmask request
    c.start(late)  # resumes: posts its masked vector with the keys it stored
    c.wait_for(lambda r: r["status"] == "unmask" and r["survivors"] == 3, "3 unmask answers")
    assert c.coord.admin("POST", f"/v1/studies/{c.study}/rounds/1/advance")["status"] == (
        "recover")  # the survivors are asked for their shares of the victim's seed only now
    done = c.wait_for(lambda r: r["status"] == "done", "the sum revealed from the shares")
    assert done["recovered_by"] == 3
    for name in c.names[1:]:
        code, out = c.finish(name)
        assert code == 0, out
        assert json.loads(out.splitlines()[0])["cohort"] == 4
    doc, total = c.model()
    summed = sum(c.noisy(n) for n in c.names)
    np.testing.assert_array_equal(total, summed[: total.size])
    _, grid = c.model("grid")
    assert grid.size == 3 ** 4 and total.size + grid.size == summed.size
    np.testing.assert_array_equal(grid, summed[total.size:])
    assert doc["contributors"] == 4
    assert [c.spent(n) for n in c.names] == ["0.75"] * 4
    assert not (c.states[victim] / "studies" / c.study / "rounds" / "1" / "unmasked").exists()
    c.start(victim)  # back after the round: nothing left to do, nothing sent twice
    code, out = c.finish(victim)
    assert code == 0 and json.loads(out.splitlines()[0])["survivors"] == 3, out


def test_member_lost_before_masking_restarts_the_round_without_it(cohort):
    c = cohort("sa-before")
    lost = c.names[0]
    c.start(lost, "--stop-after", "keys")
    assert c.finish(lost)[0] == 0
    for name in c.names[1:]:
        c.start(name)
    c.wait_for(lambda r: r["status"] == "masking" and r["masked"] == 3, "3 masked vectors")
    assert c.coord.admin("POST", f"/v1/studies/{c.study}/rounds/1/advance")["attempt"] == 2
    for name in c.names[1:]:
        code, out = c.finish(name)
        assert code == 0, out
        assert json.loads(out.splitlines()[0])["attempt"] == 2
    rounds = c.rounds()
    assert [(r["attempt"], r["status"], r["cohort"]) for r in rounds] == [
        (1, "restarted", 4), (2, "done", 3)]
    _, total = c.model()
    np.testing.assert_array_equal(total, sum(c.noisy(n) for n in c.names[1:]))
    assert [c.spent(n) for n in c.names] == ["0", "0.5", "0.5", "0.5"]  # charged once


def test_too_many_lost_abandons_and_reveals_nothing(cohort):
    c = cohort("sa-abandon")
    for name in c.names[:2]:
        c.start(name, "--stop-after", "keys")
        assert c.finish(name)[0] == 0
    for name in c.names[2:]:
        c.start(name)
    c.wait_for(lambda r: r["status"] == "masking" and r["masked"] == 2, "2 masked vectors")
    doc = c.coord.admin("POST", f"/v1/studies/{c.study}/rounds/1/advance")
    assert doc["status"] == "abandoned"  # 2 survivors < n - D = 3 (h_min 2 never undercut)
    for name in c.names[2:]:
        code, out = c.finish(name)
        assert code == 7 and "abandoned" in out, out
    model, _ = c.model()
    assert model["version"] == 0


def test_rows_per_id_is_refused_in_a_secure_round_before_anything_is_charged(cohort, tmp_path):
    c = cohort("sa-rpi")
    name = c.names[0]
    data = tmp_path / "with-id.csv"
    data.write_text("pid,x0,x1,x2,x3\n"
                    + "\n".join(f"p{i % 5},0.1,0.2,0.3,0.4" for i in range(20)) + "\n")
    done = subprocess.run(
        cli(c.states[name], "run", c.study, str(data), "--id-column", "pid",
            "--rows-per-id", "2", "--output", str(tmp_path / "out.csv"), "--wait", "120"),
        capture_output=True, text=True, timeout=180)
    assert done.returncode == EXIT_CONFIG, done.stdout + done.stderr
    assert "--rows-per-id is not supported in a secure round" in done.stderr
    ledger = subprocess.run(cli(c.states[name], "ledger", "--json"), capture_output=True,
                            text=True, timeout=60)
    assert json.loads(ledger.stdout)["entries"] == []
    assert c.spent(name) == "0"


def test_a_member_with_a_malformed_row_goes_on_without_that_row(cohort):
    """A bad value found while counting (after the reservation) must not make the member drop
    out (that would tell the coordinator something about the data), nor swap its vector for
    a noise-only one (the content would depend on one row). The row is
    dropped like a removed record and counted locally; the member goes through the round
    with the rest of its data and is charged like the others."""
    c = cohort("sa-bad-data")
    bad = c.names[1]
    rows = c.data[bad].read_text().splitlines()
    rows[len(rows) // 2] = "0.5,not-a-number,0.5,0.5"
    c.data[bad].write_text("\n".join(rows) + "\n")
    for name in c.names:
        c.start(name)
    for name in c.names:
        code, out = c.finish(name)
        assert code == 0, out
        assert ("1 malformed row(s) dropped" in out) == (name == bad), out
    rounds = c.rounds()
    assert [(r["attempt"], r["status"], r["cohort"]) for r in rounds] == [(1, "done", 4)]
    doc, total = c.model()
    np.testing.assert_array_equal(total, sum(c.noisy(n) for n in c.names))
    assert doc["contributors"] == 4
    assert [c.spent(n) for n in c.names] == ["0.5"] * 4
    ledger = subprocess.run(cli(c.states[bad], "ledger", "--json"), capture_output=True,
                            text=True, timeout=60)
    (entry,) = json.loads(ledger.stdout)["entries"]
    assert "noise-only substitute" not in entry["detail"], entry


FIFTY = {"mode": "secure", "cohort_size": 50, "max_dropouts": 5, "max_colluders": 5}


@pytest.mark.timeout(3600)  # a hang guard: fifty processes on two shared cores are slow
def test_fifty_members_five_killed_after_masking(big_cohort):
    """50 ``fedod-participant round`` processes on loopback (D = T = 5: a complete masking graph;
    with five colluders sparse graphs start at 70 members; the sparse path with real processes
    is tests/integration/test_beacon_round.py). One member posts its keys and leaves, so the
    round cannot pass the masking phase until it returns; once the coordinator has recorded the
    other 49 masked vectors, five of them are SIGKILLed. The returning member masks, the 44
    other survivors answer the unmask request, the admin declares the five lost, and the
    survivors send shares of their seeds (t = T + D + 1 = 11 of them suffice). The model is
    exactly the sum of the 50 noisy vectors (the five lost ones masked, so theirs are in it);
    every ledger holds one charge."""
    c = big_cohort("sa-fifty", n=50, aggregation=FIFTY)
    late = c.names[-1]
    victims = c.names[:5]
    c.start(late, "--stop-after", "keys")
    assert c.finish(late)[0] == 0
    for name in c.names[:-1]:
        c.start(name)
    c.wait_for(lambda r: r["status"] == "masking" and r["masked"] == 49, "49 masked vectors")
    for name in victims:
        c.kill(name)  # its masked vector is recorded; it never answers the unmask
    c.start(late)
    c.wait_for(lambda r: r["status"] == "unmask" and r["survivors"] == 45, "45 unmask answers")
    assert c.coord.admin("POST", f"/v1/studies/{c.study}/rounds/1/advance")["status"] == (
        "recover")
    done = c.wait_for(lambda r: r["status"] in ("done", "abandoned", "rejected"), "the reveal")
    assert done["status"] == "done", done
    assert done["recovered_by"] == 45  # complete graph: every survivor holds shares
    for name in c.names[5:]:
        code, out = c.finish(name)
        assert code == 0, out
        assert json.loads(out.splitlines()[0])["cohort"] == 50
    doc, total = c.model()
    np.testing.assert_array_equal(total, sum(c.noisy(n) for n in c.names))
    assert doc["contributors"] == 50
    assert [c.spent(n) for n in c.names] == ["0.5"] * 50
    for name in c.names:
        ledger = subprocess.run(cli(c.states[name], "ledger", "--json"), capture_output=True,
                                text=True, timeout=600)  # a hang guard only
        assert len(json.loads(ledger.stdout)["entries"]) == 1, ledger.stdout
