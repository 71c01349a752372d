"""``fedod-consortium beacon``'s decisions and record (participant.consortium.beacon); the
command against a real coordinator is tests/integration/test_beacon_round.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from common.secagg import participant as proto
from common.secagg import server
from common.secagg.beacon import BEACON_ATTEMPTS, verify_beacon
from common.secagg.draws import verify_draw
from common.secagg.membership import MembershipBody, sign_membership
from common.secagg.messages import RoundRef, RoundRefused, b64d, b64e
from common.secagg.params import AggregationParams
from common.secagg.schemas import BeaconPending
from participant.consortium.beacon import BeaconRecordFile, beacon_for
from participant.consortium.cli import main

NOW = datetime.now(UTC)


PARAMS = AggregationParams(mode="secure", cohort_size=60, max_dropouts=1, max_colluders=24)


class Cohort:
    """60 members' identities and round keys, and the rosters a coordinator signs of them."""

    def __init__(self) -> None:
        self.identity = {f"h{i:02d}": Ed25519PrivateKey.generate() for i in range(60)}
        self.coordinator = Ed25519PrivateKey.generate()

    def identities(self) -> dict[str, str]:
        return {n: b64e(proto.raw_public(k)) for n, k in self.identity.items()}

    def publish(self, ref: RoundRef, names: list[str] | None = None):
        adverts = {n: proto.make_advert(ref, n, self.identity[n], proto.RoundSecrets.generate())
                   for n in names or sorted(self.identity)}
        return server.build_roster(ref, adverts, universe=sorted(self.identity),
                                   config_digest="ab" * 32, modulus_bits=32,
                                   threshold=PARAMS.threshold, degree=PARAMS.degree,
                                   key=self.coordinator)


@pytest.fixture(scope="module")
def study():
    """A beacon study's cohort (n = 60) and its certificate signed by ``key``."""
    cohort = Cohort()
    key = Ed25519PrivateKey.generate()
    body = MembershipBody(study_id="s1", version=1, expires_at=NOW + timedelta(days=1),
                          cohort_size=60, max_dropouts=1, max_colluders=24,
                          members=cohort.identities())
    return cohort, sign_membership(body, key), key


def _pending(cohort, attempt=1, names=None):
    ref = RoundRef(study_id="s1", round=1, attempt=attempt)
    return BeaconPending(study_id="s1", round=1, attempt=attempt,
                         roster=cohort.publish(ref, names))


def test_a_roster_is_signed_once_recorded_first_and_a_retry_gets_the_same_signature(
        study, tmp_path):
    cohort, membership, key = study
    record = BeaconRecordFile(tmp_path / "beacon.jsonl")
    pending = _pending(cohort)
    first = beacon_for(pending, membership, key, record, NOW)
    lines = record.path.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["signature"] == first.signature
    assert beacon_for(pending, membership, key, record, NOW) == first
    assert len(record.path.read_text().splitlines()) == 1
    ref = RoundRef(study_id="s1", round=1, attempt=1)
    verify_beacon(first.signature, ref, pending.roster.digest(), key.public_key())
    assert b64d(first.consortium_key) == key.public_key().public_bytes_raw()


def test_a_second_roster_for_the_same_attempt_is_refused(study, tmp_path):
    cohort, membership, key = study
    record = BeaconRecordFile(tmp_path / "beacon.jsonl")
    beacon_for(_pending(cohort), membership, key, record, NOW)
    fewer = _pending(cohort, names=sorted(cohort.identity)[1:])  # another roster, attempt 1
    with pytest.raises(RoundRefused, match="already signed another roster"):
        beacon_for(fewer, membership, key, record, NOW)
    assert len(record.path.read_text().splitlines()) == 1
    beacon_for(_pending(cohort, attempt=2, names=sorted(cohort.identity)[1:]), membership,
               key, record, NOW)  # a new attempt is a new draw, within the cap


def test_an_attempt_above_the_cap_is_refused(study, tmp_path):
    cohort, membership, key = study
    with pytest.raises(RoundRefused, match=f"at most {BEACON_ATTEMPTS} attempts"):
        beacon_for(_pending(cohort, attempt=BEACON_ATTEMPTS + 1), membership, key,
                   BeaconRecordFile(tmp_path / "b.jsonl"), NOW)


@pytest.mark.parametrize("how, match", [
    ("other key", "not signed by the consortium key"),
    ("expired", "expired"),
    ("too small", "allows 59 to 60"),
    ("other round", "the coordinator says it waits for"),
])
def test_a_roster_that_is_not_certified_is_refused(study, tmp_path, how, match):
    cohort, membership, key = study
    pending = _pending(cohort, names=sorted(cohort.identity)[2:] if how == "too small" else None)
    if how == "other round":
        pending = pending.model_copy(update={"round": 2})
    signer = Ed25519PrivateKey.generate() if how == "other key" else key
    now = NOW + timedelta(days=2) if how == "expired" else NOW
    with pytest.raises(RoundRefused, match=match):
        beacon_for(pending, membership, signer, BeaconRecordFile(tmp_path / "b.jsonl"), now)
    assert not (tmp_path / "b.jsonl").exists() or not (tmp_path / "b.jsonl").read_text()


def test_help_names_every_option(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["beacon", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    for option in ("--key", "--coordinator", "--study", "--membership", "--record", "--once"):
        assert option in out


def test_an_unreachable_address_is_a_clear_error(study, tmp_path, capsys):
    _, membership, key = study
    (tmp_path / "m.json").write_text(membership.model_dump_json())
    from common.study.signing import save_private_key

    save_private_key(key, tmp_path / "k.pem")
    code = main(["beacon", "--key", str(tmp_path / "k.pem"), "--coordinator", "nowhere",
                 "--study", "s1", "--membership", str(tmp_path / "m.json"), "--record",
                 str(tmp_path / "r.jsonl"), "--once"])
    assert code == 1 and "is not a URL" in capsys.readouterr().err


def _at(cohort, number, attempt, names=None):
    ref = RoundRef(study_id="s1", round=number, attempt=attempt)
    return BeaconPending(study_id="s1", round=number, attempt=attempt,
                         roster=cohort.publish(ref, names))


def test_draw_counts_come_from_the_record_across_rounds_and_a_retry_resends_them(
        study, tmp_path):
    cohort, membership, key = study
    everyone = sorted(cohort.identity)
    record = BeaconRecordFile(tmp_path / "beacon.jsonl")
    beacon_for(_at(cohort, 1, 1), membership, key, record, NOW)
    beacon_for(_at(cohort, 2, 1, everyone[1:]), membership, key, record, NOW)  # h00 left out
    third = _at(cohort, 3, 1)  # round 2 aborted, round 3 opened: a fresh draw, counted
    posted = beacon_for(third, membership, key, record, NOW)
    assert set(posted.draws) == set(everyone)
    assert posted.draws["h00"].count == 2 and posted.draws["h01"].count == 3
    ref = RoundRef(study_id="s1", round=3, attempt=1)
    for name, draw in posted.draws.items():
        verify_draw(ref, third.roster.digest(), name, draw.count, draw.signature,
                    key.public_key())
    assert beacon_for(third, membership, key, record, NOW) == posted  # a retry: the same
    assert len(record.path.read_text().splitlines()) == 3
    lines = [json.loads(line) for line in record.path.read_text().splitlines()]
    assert lines[1]["members"] == everyone[1:]  # the record lists each roster's members
