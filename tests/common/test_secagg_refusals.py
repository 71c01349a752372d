"""Secure aggregation protocol (common.secagg): every replayed, reordered or forged message is
refused, by the members and by the coordinator."""

from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from secagg_kit import DIGEST, Cohort

from common.errors import SignatureInvalid
from common.secagg import server as s
from common.secagg.messages import RoundRef, RoundRefused, SignedMessage, sign_message
from common.secagg.wire import make_advert_frame


def _forged(msg: SignedMessage) -> SignedMessage:
    return msg.model_copy(update={"payload": msg.payload.replace('"round":1', '"round":2')})


def _flipped(frame: bytes, at: int = 20) -> bytes:
    return frame[:at] + bytes([frame[at] ^ 1]) + frame[at + 1 :]


def test_roster_checks_refuse_forgery_replay_and_padding():
    cohort = Cohort.make(4, max_dropouts=1)
    roster = cohort.publish()
    cohort.check("h00")  # the genuine roster passes
    with pytest.raises(SignatureInvalid, match="signature"):
        cohort.check("h00", _forged(roster))
    stranger = Ed25519PrivateKey.generate()
    with pytest.raises(SignatureInvalid, match="signature"):
        cohort.check("h00", sign_message("roster", cohort.server_roster().body, stranger))
    # a roster of an earlier attempt (replayed) is refused by the next attempt
    old = cohort.roster
    cohort.ref = RoundRef(study_id="s1", round=1, attempt=2)
    with pytest.raises(RoundRefused, match="replayed or out of order"):
        cohort.check("h00", old)
    cohort.ref = RoundRef(study_id="s1", round=1, attempt=1)
    for extra in ("h04", "h05"):
        cohort.add(extra)
    cohort.params = cohort.params.model_copy()  # n stays 4
    with pytest.raises(RoundRefused, match="3 to 4"):
        cohort.check("h00", cohort.publish())
    with pytest.raises(RoundRefused, match="3 to 4"):
        cohort.check("h00", cohort.publish(["h00", "h01"]))
    with pytest.raises(RoundRefused, match="does not name h00"):
        cohort.check("h00", cohort.publish(["h01", "h02", "h03"]))


def test_roster_refuses_an_advert_signed_by_another_key_or_altered():
    cohort = Cohort.make(3)
    evil = cohort.members["h01"]
    genuine = evil.advert
    evil.advert = make_advert_frame(cohort.ref, "h01", Ed25519PrivateKey.generate(),
                                    bytes(32))
    with pytest.raises(SignatureInvalid, match="advert frame of h01: signature"):
        cohort.check("h00", cohort.publish())
    evil.advert = _flipped(genuine)  # a round key swapped by whoever relays it
    with pytest.raises(SignatureInvalid, match="advert frame of h01: signature"):
        cohort.check("h00", cohort.publish())


def test_coordinator_refuses_forged_replayed_and_misrouted_messages():
    cohort = Cohort.make(3)
    cohort.publish()
    h0 = cohort.members["h00"]
    with pytest.raises(SignatureInvalid):
        s.accept_advert(h0.advert, ref=cohort.ref, name="h00",
                        identity=cohort.members["h01"].identity.public_key())
    with pytest.raises(SignatureInvalid, match="another sender"):  # h00's advert posted as h01
        s.accept_advert(h0.advert, ref=cohort.ref, name="h01", identity=h0.identity.public_key())
    with pytest.raises(RoundRefused, match="open attempt is s1/1/2"):
        s.accept_advert(h0.advert, ref=RoundRef(study_id="s1", round=1, attempt=2),
                        name="h00", identity=h0.identity.public_key())
    upload = cohort.mask("h00", np.ones(4))
    with pytest.raises(SignatureInvalid):
        cohort.accept({"h00": _flipped(upload)}, 4)
    # the same upload replayed into a restarted attempt (new roster) is refused
    for m in cohort.members.values():
        m.roster = None
    cohort.ref = RoundRef(study_id="s1", round=1, attempt=2)
    for name in list(cohort.members):
        cohort.add(name)
    cohort.publish()
    with pytest.raises(RoundRefused, match="open attempt is s1/1/2"):
        cohort.accept({"h00": upload}, 4)


def test_unmask_refuses_partial_sums_replays_and_a_second_attempt():
    cohort = Cohort.make(4, max_dropouts=1)
    cohort.publish()
    accepted = cohort.accept({n: cohort.mask(n, np.ones(3)) for n in cohort.members}, 3)
    with pytest.raises(RoundRefused, match="partial sum is never revealed"):
        cohort.answer("h00", cohort.request(["h00", "h01", "h02"]), accepted)
    with pytest.raises(SignatureInvalid):
        cohort.answer("h00", _forged(cohort.request(accepted)), accepted)
    request = cohort.request(accepted)
    cohort.answer("h00", request, accepted)
    assert cohort.members["h00"].unmasked == 1
    cohort.answer("h00", request, accepted)  # the same attempt again: same answer allowed
    # attempt 2 of the same round with the same noisy vector: refused
    cohort.ref = RoundRef(study_id="s1", round=1, attempt=2)
    h0 = cohort.members["h00"]
    for name in list(cohort.members):
        m = cohort.add(name)
        m.unmasked = 1 if name == "h00" else None
    cohort.publish(["h00", "h01", "h02"])
    accepted2 = cohort.accept({n: cohort.mask(n, np.ones(3)) for n in ["h00", "h01", "h02"]}, 3)
    with pytest.raises(RoundRefused, match="already unmasked in attempt 1"):
        cohort.answer("h00", cohort.request(accepted2), accepted2)
    assert h0.unmasked == 1
    cohort.answer("h01", cohort.request(accepted2), accepted2)


def test_unmask_refuses_a_request_from_before_the_roster_it_names():
    """A request of attempt 1 delivered while attempt 2 runs (reordered) is refused."""
    cohort = Cohort.make(3)
    cohort.publish()
    accepted = cohort.accept({n: cohort.mask(n, np.ones(2)) for n in cohort.members}, 2)
    stale = cohort.request(accepted)
    cohort.ref = RoundRef(study_id="s1", round=1, attempt=2)
    for name in list(cohort.members):
        cohort.add(name).roster = None
    cohort.publish()
    accepted2 = cohort.accept({n: cohort.mask(n, np.ones(2)) for n in cohort.members}, 2)
    with pytest.raises(RoundRefused, match="replayed or out of order"):
        cohort.answer("h00", stale, accepted2)
    assert cohort.members["h00"].unmasked is None


def test_config_digest_mismatch_is_refused():
    cohort = Cohort.make(3)
    roster = s.build_roster(cohort.ref, {n: m.advert for n, m in cohort.members.items()},
                            universe=sorted(cohort.members), config_digest="cd" * 32,
                            modulus_bits=32, threshold=cohort.params.threshold,
                            degree=cohort.params.degree, key=cohort.coordinator)
    assert DIGEST != "cd" * 32
    with pytest.raises(RoundRefused, match="another study config"):
        cohort.check("h00", roster)
