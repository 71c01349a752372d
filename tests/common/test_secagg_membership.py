"""Consortium-certified membership: verify refusals, invented members, h_min, item 11."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from secagg_kit import DIGEST, Cohort

from common.errors import SignatureInvalid
from common.secagg import participant as p
from common.secagg import server as s
from common.secagg.membership import (
    MembershipBody,
    SignedMembership,
    sign_membership,
    verify_membership,
)
from common.secagg.messages import RoundRefused, b64e

NOW = datetime(2026, 11, 28, 6, 0, tzinfo=UTC)
CONSORTIUM = Ed25519PrivateKey.generate()


def certify(cohort: Cohort, key=CONSORTIUM, **over) -> SignedMembership:
    fields = dict(
        study_id="s1", version=1, expires_at=NOW + timedelta(days=30),
        cohort_size=cohort.params.cohort_size, max_dropouts=cohort.params.max_dropouts,
        max_colluders=cohort.params.max_colluders,
        members={n: b64e(p.raw_public(m.identity)) for n, m in cohort.members.items()},
    )
    return sign_membership(MembershipBody(**{**fields, **over}), key)


def verify(cohort: Cohort, signed: SignedMembership, **kw) -> MembershipBody:
    args = dict(study="s1", params=cohort.params, now=NOW)
    return verify_membership(signed, CONSORTIUM.public_key(), **{**args, **kw})


def test_a_good_certificate_verifies():
    cohort = Cohort.make(4)
    body = verify(cohort, certify(cohort))
    assert sorted(body.members) == sorted(cohort.members)


@pytest.mark.parametrize(
    ("over", "kw", "match"),
    [
        ({"key": Ed25519PrivateKey.generate()}, {}, "not signed by the consortium key"),
        ({"study_id": "other"}, {}, "for study 'other'"),
        ({"expires_at": NOW}, {}, "expired"),
        ({"max_colluders": 2}, {}, r"\(n, D, T\)"),
        ({"cohort_size": 5}, {}, r"\(n, D, T\)"),
        ({}, {"now": NOW + timedelta(days=31)}, "expired"),
        ({"members": {}}, {}, "exactly n = 4"),
    ],
)
def test_verify_refusals(over, kw, match):
    cohort = Cohort.make(4)
    with pytest.raises(RoundRefused, match=match):
        verify(cohort, certify(cohort, **over), **kw)


def test_a_repeated_key_is_refused():
    cohort = Cohort.make(3)
    key = b64e(p.raw_public(cohort.members["h00"].identity))
    signed = certify(cohort, members={"h00": key, "h01": key, "h02": key})
    with pytest.raises(RoundRefused, match="twice"):
        verify(cohort, signed)


def test_a_tampered_payload_is_refused():
    cohort = Cohort.make(3)
    signed = certify(cohort)
    forged = SignedMembership(payload=signed.payload.replace('"version":1', '"version":2'),
                              signature=signed.signature)
    with pytest.raises(RoundRefused, match="not signed"):
        verify(cohort, forged)


def check(cohort: Cohort, name: str, certified: MembershipBody):
    m = cohort.members[name]
    return p.check_roster(
        cohort.roster, me=name, my_advert=m.advert,
        coordinator_key=cohort.coordinator.public_key(), ref=cohort.ref, params=cohort.params,
        config_digest=DIGEST, modulus_bits=cohort.k, identities=certified.members,
        adverts=s.neighbour_adverts(cohort.server_roster(), name,
                                    {n: x.advert for n, x in cohort.members.items()}),
    )


def test_certified_roster_passes():
    cohort = Cohort.make(4)
    certified = verify(cohort, certify(cohort))
    cohort.publish()
    assert check(cohort, "h00", certified).names == sorted(cohort.members)


def test_invented_members_are_refused():
    """The coordinator's own identities (valid adverts) in place of certified members: a
    neighbour's advert does not verify under the key the consortium certified for it."""
    honest = Cohort.make(4)
    certified = verify(honest, certify(honest))
    for name in ("h01", "h02", "h03"):  # same names, keys the coordinator made
        honest.members[name].identity = Ed25519PrivateKey.generate()
        honest.add(name)
    honest.publish()
    with pytest.raises(SignatureInvalid, match="signature does not verify"):
        check(honest, "h00", certified)


def test_an_uncertified_name_is_refused():
    cohort = Cohort.make(4, max_dropouts=1)
    certified = verify(cohort, certify(cohort))
    cohort.add("zz-coordinator")
    cohort.publish(["h00", "h01", "h02", "zz-coordinator"])  # its bitmap has a 5th bit
    with pytest.raises(RoundRefused, match="beyond the certificate"):
        check(cohort, "h00", certified)


@pytest.mark.parametrize("size", [1, 2, 3])
def test_roster_below_certified_h_min_is_refused(size):
    """n = 6, D = 2, T = 1: h_min = 3, n - D = 4; a roster of certified members only, but
    fewer than max(n - D, h_min) of them, is refused."""
    cohort = Cohort.make(6, max_dropouts=2, max_colluders=1)
    certified = verify(cohort, certify(cohort))
    cohort.publish([f"h{i:02d}" for i in range(size)])
    with pytest.raises(RoundRefused, match="members"):
        check(cohort, "h00", certified)


def test_mask_upload_refuses_after_another_attempt_was_unmasked():
    cohort = Cohort.make(3, attempt=2)
    cohort.publish()
    roster = cohort.check("h00")
    m = cohort.members["h00"]
    with pytest.raises(RoundRefused, match="already unmasked attempt 1"):
        p.mask_upload(roster, me="h00", identity=m.identity, secrets=m.secrets,
                      noisy=np.zeros(4, dtype=np.int64), unmasked_attempt=1)
    assert p.mask_upload(roster, me="h00", identity=m.identity, secrets=m.secrets,
                         noisy=np.zeros(4, dtype=np.int64), unmasked_attempt=2)


def test_a_split_view_is_detected_before_any_unmask_answer_leaves():
    """The coordinator shows h00 a roster without h03 and the others the full one (both
    signed by it), and serves each member its neighbours' acknowledgements. h00's
    acknowledgement is over another roster digest than the others', so every member refuses
    to answer: no self seed leaves, no attempt is recorded as unmasked."""
    cohort = Cohort.make(4, max_dropouts=1)
    small = cohort.publish(["h00", "h01", "h02"])
    cohort.check("h00", small)
    cohort.publish()
    cohort.uploads = {n: cohort.mask(n, np.ones(3)) for n in sorted(cohort.members)}
    request = s.build_request(cohort.server_roster(), 4, cohort.coordinator)
    for name in sorted(cohort.members):
        with pytest.raises(RoundRefused, match="split view|another roster"):
            cohort.answer(name, request)
    assert all(m.unmasked is None for m in cohort.members.values())


def test_an_unmask_request_without_acknowledgements_is_refused():
    cohort = Cohort.make(3)
    cohort.publish()
    cohort.accept({n: cohort.mask(n, np.ones(3)) for n in cohort.members}, 3)
    request = s.build_request(cohort.server_roster(), 3, cohort.coordinator)
    with pytest.raises(RoundRefused, match="did not acknowledge"):
        cohort.answer("h00", request, acks="")


def _config(cohort: Cohort):
    from common.study.config import FeatureSpec, PrivacyParams, new_study_config

    return new_study_config("s1", [FeatureSpec(name="x", lo=0.0, hi=1.0)], n_tables=2,
                            privacy=PrivacyParams(epsilon_lsh="1"), aggregation=cohort.params)


def test_a_member_refuses_a_certificate_older_than_one_it_verified():
    """A key rotated out in v2 stays out: the member that verified v2 refuses a replayed v1
    (still signed and unexpired)."""
    from common.secagg.membership import rotate_membership
    from participant.secagg.checks import certified_members

    cohort = Cohort.make(4)
    key = b64e(p.raw_public(CONSORTIUM))
    v1 = certify(cohort, expires_at=datetime.now(UTC) + timedelta(days=3))
    new_key = b64e(p.raw_public(Ed25519PrivateKey.generate()))
    v2 = rotate_membership(v1, CONSORTIUM, member="h01", identity_key=new_key,
                           expires_at=datetime.now(UTC) + timedelta(days=3))
    assert (v2.body().version, v2.body().members["h01"]) == (2, new_key)
    now, config = datetime.now(UTC), _config(cohort)
    assert certified_members(v2, key, "s1", config, now, 2).members["h01"] == new_key
    with pytest.raises(RoundRefused, match="v1 is older than v2.*bring back a revoked key"):
        certified_members(v1, key, "s1", config, now, 2)
    assert certified_members(v1, key, "s1", config, now).version == 1  # no floor yet


def test_rotation_needs_the_signing_key_a_member_and_a_new_key():
    from common.secagg.membership import rotate_membership

    cohort = Cohort.make(4)
    v1 = certify(cohort)
    later = NOW + timedelta(days=60)
    with pytest.raises(RoundRefused, match="not signed by this consortium key"):
        rotate_membership(v1, Ed25519PrivateKey.generate(), member="h01",
                          identity_key=b64e(bytes(32)), expires_at=later)
    with pytest.raises(RoundRefused, match="not a member"):
        rotate_membership(v1, CONSORTIUM, member="zz", identity_key=b64e(bytes(32)),
                          expires_at=later)
    with pytest.raises(RoundRefused, match="already certified"):
        rotate_membership(v1, CONSORTIUM, member="h01",
                          identity_key=v1.body().members["h02"], expires_at=later)
