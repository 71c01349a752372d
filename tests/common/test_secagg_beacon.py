"""The consortium beacon of sparse masking graphs (common.secagg.beacon): what it signs, what
it refuses, and how members use it (participant.secagg.checks)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from secagg_kit import DIGEST, Cohort

from common.secagg.beacon import (
    BEACON_ATTEMPTS,
    BeaconRecord,
    beacon_message,
    decide,
    sign_beacon,
    verify_beacon,
)
from common.secagg.draws import BEACON_DRAWS, sign_draw
from common.secagg.graph import MaskingGraph, graph_seed
from common.secagg.membership import MembershipBody, sign_membership
from common.secagg.messages import RoundRef, RoundRefused, b64d, b64e
from common.secagg.params import AggregationParams
from common.secagg.schemas import BeaconDraw, RoundState
from common.study.config import FeatureSpec, PrivacyParams, new_study_config
from participant.secagg.checks import check_certified_roster

REF = RoundRef(study_id="s1", round=3, attempt=2)
KEY = Ed25519PrivateKey.generate()
N, D, T = 100, 5, 5  # the benchmark's smallest cohort: sparse (k = 8), so it needs the beacon


def test_every_sparse_graph_needs_the_beacon_and_small_test_cohorts_do_not():
    needs = AggregationParams(mode="secure", cohort_size=N, max_dropouts=D, max_colluders=T)
    assert needs.needs_beacon and needs.degree == 8 < N - D - 1
    for n, d, t in [(4, 1, 1), (20, 2, 2), (50, 5, 5), (59, 1, 23), (60, 1, 24)]:
        assert not AggregationParams(mode="secure", cohort_size=n, max_dropouts=d,
                                     max_colluders=t).needs_beacon
    for n in range(3, 130, 7):
        for d, t in [(0, 1), (n // 20, max(1, n // 20)), (n // 10, max(1, n // 5))]:
            try:
                params = AggregationParams(mode="secure", cohort_size=n, max_dropouts=d,
                                           max_colluders=t)
            except ValueError:
                continue  # (n, D, T) not allowed
            assert params.needs_beacon == (params.degree < n - 1), (n, d, t)


@pytest.mark.parametrize("other", [
    {"study_id": "s2"}, {"round": 4}, {"attempt": 1}, {"digest": "cd" * 32}, {"key": True}])
def test_the_signature_binds_study_round_attempt_and_roster_digest(other):
    signature = sign_beacon(REF, DIGEST, KEY)
    ref = REF.model_copy(update={k: v for k, v in other.items() if k in RoundRef.model_fields})
    key = Ed25519PrivateKey.generate() if "key" in other else KEY
    with pytest.raises(RoundRefused, match="does not verify under the consortium key"):
        verify_beacon(signature, ref, other.get("digest", DIGEST), key.public_key())
    assert verify_beacon(signature, REF, DIGEST, KEY.public_key()) == b64d(signature)


def test_the_message_is_domain_separated_and_the_signature_deterministic():
    message = beacon_message(REF, DIGEST)
    assert message.startswith(b"fedod-secagg/beacon/1\x00s1\x00")
    assert message.endswith(bytes.fromhex(DIGEST)) and len(message) == 22 + 3 + 8 + 2 + 32
    assert sign_beacon(REF, DIGEST, KEY) == sign_beacon(REF, DIGEST, KEY)  # RFC 8032


@pytest.mark.parametrize("signature, match", [
    (None, "served no consortium beacon signature"),
    ("not base64!", "does not verify"),
    (b64e(bytes(63)), "does not verify"),
    (b64e(bytes(64)), "does not verify"),
])
def test_a_missing_or_malformed_signature_is_refused(signature, match):
    with pytest.raises(RoundRefused, match=match):
        verify_beacon(signature, REF, DIGEST, KEY.public_key())


def test_an_attempt_above_the_cap_is_refused_by_the_beacon_and_by_members():
    late = REF.model_copy(update={"attempt": BEACON_ATTEMPTS + 1})
    signature = b64e(KEY.sign(beacon_message(late, DIGEST)))  # a key holder that overstepped
    with pytest.raises(RoundRefused, match=f"at most {BEACON_ATTEMPTS} attempts"):
        verify_beacon(signature, late, DIGEST, KEY.public_key())
    with pytest.raises(RoundRefused, match=f"at most {BEACON_ATTEMPTS} attempts"):
        decide([], late, DIGEST)
    assert decide([], REF.model_copy(update={"attempt": BEACON_ATTEMPTS}), DIGEST) is None


def test_the_beacon_signs_one_roster_per_attempt_and_a_retry_gets_the_same_signature():
    done = BeaconRecord("s1", 3, 2, DIGEST, sign_beacon(REF, DIGEST, KEY))
    assert decide([], REF, DIGEST) is None
    assert decide([done], REF, DIGEST) == done
    with pytest.raises(RoundRefused, match="already signed another roster"):
        decide([done], REF, "cd" * 32)
    for other in ({"attempt": 3}, {"round": 4}, {"study_id": "s2"}):
        assert decide([done], REF.model_copy(update=other), "cd" * 32) is None


def test_the_seed_differs_from_the_unbeaconed_one_and_follows_the_signature():
    one, two = (b64d(sign_beacon(REF, DIGEST, k)) for k in (KEY, Ed25519PrivateKey.generate()))
    seeds = {graph_seed(DIGEST), graph_seed(DIGEST, one), graph_seed(DIGEST, two)}
    assert len(seeds) == 3
    names = [f"h{i:02d}" for i in range(N)]
    plain, beaconed = MaskingGraph(names, DIGEST, 24), MaskingGraph(names, DIGEST, 24, one)
    assert any(plain.neighbours(n) != beaconed.neighbours(n) for n in names)
    assert MaskingGraph(names, DIGEST, 24, one).neighbours("h00") == beaconed.neighbours("h00")


@pytest.fixture(scope="module")
def beacon_study():
    """A published roster of the n = 60 cohort, its membership certificate and config."""
    cohort = Cohort.make(N, max_dropouts=D, max_colluders=T)
    roster = cohort.publish()
    consortium = Ed25519PrivateKey.generate()
    body = MembershipBody(study_id="s1", version=1, expires_at=datetime.now(UTC) + timedelta(1),
                          cohort_size=N, max_dropouts=D, max_colluders=T,
                          members=cohort.identities())
    config = new_study_config("s1", [FeatureSpec(name="x", lo=0.0, hi=1.0)], n_tables=2,
                              privacy=PrivacyParams(epsilon_lsh="0.5"), aggregation=cohort.params)
    return cohort, roster, sign_membership(body, consortium), consortium, config


def member_checks(beacon_study, signature, name="h00", draw="valid", last=None):
    """The member's checks of the served state; ``draw`` its draw statement (default: a
    valid count of 1), ``last`` its ``c_last`` (None: not about to mask)."""
    cohort, roster, membership, consortium, config = beacon_study
    if draw == "valid":
        draw = BeaconDraw(count=1, signature=sign_draw(cohort.ref, roster.digest(), name, 1,
                                                       consortium))
    st = RoundState(round=1, attempt=1, status="masking", roster=roster, membership=membership,
                    adverts=cohort.served(name, roster), beacon=signature, draw=draw)
    return check_certified_roster(
        st, cohort.members[name].advert, cohort.ref, consortium_key=b64e(
            consortium.public_key().public_bytes_raw()), config=config, me=name,
        coordinator_key=cohort.coordinator.public_key(), params=cohort.params,
        config_digest=DIGEST, modulus_bits=cohort.k, last_draw=last)



def test_a_member_masks_with_the_neighbours_the_beacon_draws(beacon_study):
    cohort, roster, _, consortium, _ = beacon_study
    signature = sign_beacon(cohort.ref, roster.digest(), consortium)
    cohort.beacon = b64d(signature)
    try:
        checked = member_checks(beacon_study, signature)
    finally:
        cohort.beacon = None
    assert checked.beacon == b64d(signature)
    plain = MaskingGraph(checked.names, roster.digest(), checked.body.degree)
    assert checked.holders("h00") == MaskingGraph(
        checked.names, roster.digest(), checked.body.degree, b64d(signature)).neighbours("h00")
    assert checked.holders("h00") != plain.neighbours("h00")


@pytest.mark.parametrize("how", ["missing", "other key", "other attempt", "other roster"])
def test_a_member_refuses_a_bad_or_missing_beacon_before_reading_anything(beacon_study, how):
    cohort, roster, _, consortium, _ = beacon_study
    key = Ed25519PrivateKey.generate() if how == "other key" else consortium
    ref = cohort.ref.model_copy(update={"attempt": 2}) if how == "other attempt" else cohort.ref
    digest = "cd" * 32 if how == "other roster" else roster.digest()
    signature = None if how == "missing" else sign_beacon(ref, digest, key)
    with pytest.raises(RoundRefused, match="beacon"):
        member_checks(beacon_study, signature)


def test_a_beaconed_round_reveals_the_sum():
    cohort = Cohort.make(N, max_dropouts=D, max_colluders=T)
    consortium = Ed25519PrivateKey.generate()
    cohort.beacon = b64d(sign_beacon(cohort.ref, cohort.publish().digest(), consortium))
    rng = np.random.default_rng(7)
    vectors = {n: rng.integers(-50, 50, size=6) for n in cohort.members}
    np.testing.assert_array_equal(cohort.run(vectors), sum(vectors.values()))


@pytest.mark.parametrize("how", ["missing", "other member", "other count", "other key",
                                 "other roster"])
def test_a_member_refuses_a_draw_statement_not_its_own_under_the_pinned_key(beacon_study, how):
    cohort, roster, _, consortium, _ = beacon_study
    signature = sign_beacon(cohort.ref, roster.digest(), consortium)
    key = Ed25519PrivateKey.generate() if how == "other key" else consortium
    member = "h01" if how == "other member" else "h00"
    digest = "cd" * 32 if how == "other roster" else roster.digest()
    draw = BeaconDraw(count=2, signature=sign_draw(cohort.ref, digest, member, 2, key))
    if how == "other count":
        draw = BeaconDraw(count=3, signature=draw.signature)
    if how == "missing":
        with pytest.raises(RoundRefused, match="served no beacon draw count for h00"):
            member_checks(beacon_study, signature, draw=None)
        return
    with pytest.raises(RoundRefused, match="draw count .* does not verify"):
        member_checks(beacon_study, signature, draw=draw)


def test_a_member_masks_within_g_draws_of_its_last_release_and_refuses_beyond(beacon_study):
    cohort, roster, _, consortium, _ = beacon_study
    signature = sign_beacon(cohort.ref, roster.digest(), consortium)
    cohort.beacon = b64d(signature)

    def at(count, last):
        draw = BeaconDraw(count=count, signature=sign_draw(cohort.ref, roster.digest(), "h00",
                                                           count, consortium))
        return member_checks(beacon_study, signature, draw=draw, last=last)
    try:
        assert at(BEACON_DRAWS, 0).beacon == b64d(signature)  # a first release: gap = count
        assert at(3 + BEACON_DRAWS, 3).beacon == b64d(signature)
        assert at(5, 5).beacon == b64d(signature)  # the same draw again (a re-sent frame)
        for count, last in [(BEACON_DRAWS + 1, 0), (4 + BEACON_DRAWS, 3)]:
            with pytest.raises(RoundRefused, match="aborted too many draws including this "
                               "member since its last release.*nothing was read or sent"):
                at(count, last)
        assert at(100, None).beacon == b64d(signature)  # unmask phase: verified, no gap check
    finally:
        cohort.beacon = None
