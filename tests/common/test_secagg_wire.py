"""Binary round frames (common.secagg.wire): exact sizes, and strict parsing that refuses
truncated, oversized, mis-typed, replayed, re-addressed and tampered frames."""

from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from secagg_kit import Cohort

from common.errors import PayloadInvalid, PayloadTooLarge, SignatureInvalid
from common.secagg import server as s
from common.secagg.messages import RoundRef, RoundRefused
from common.secagg.wire import frame_size, open_frame, sign_frame

REF = RoundRef(study_id="s1", round=7, attempt=2)
KEY = Ed25519PrivateKey.generate()
DIGEST = "cd" * 32
BODY = bytes(range(40))


def _open(frame: bytes, **over):
    args = dict(ref=REF, sender="h00", key=KEY.public_key(), roster_digest=DIGEST)
    return open_frame(frame, "masked", len(BODY), **{**args, **over})


def _flip(frame: bytes, at: int) -> bytes:
    return frame[:at] + bytes([frame[at] ^ 0x01]) + frame[at + 1 :]


FRAME = sign_frame("masked", REF, "h00", BODY, KEY, DIGEST)


def test_a_frame_is_header_body_signature_and_opens_to_its_body():
    assert len(FRAME) == frame_size(len(BODY)) == 11 + 40 + 64
    assert _open(FRAME) == BODY
    assert sign_frame("masked", REF, "h00", BODY, KEY, DIGEST) == FRAME  # a retry: same bytes


@pytest.mark.parametrize(
    "frame,error,match",
    [
        (FRAME[:-1], PayloadInvalid, "truncated"),
        (FRAME[:64], PayloadInvalid, "truncated"),
        (FRAME[:5], PayloadInvalid, "truncated"),
        (b"", PayloadInvalid, "truncated"),
        (FRAME + b"\0", PayloadTooLarge, "this round's is 115"),
        (FRAME[:11] + BODY + BODY + FRAME[-64:], PayloadTooLarge, "this round's is 115"),
        (bytes([3]) + FRAME[1:], PayloadInvalid, "expected a masked frame"),
        (bytes([9]) + FRAME[1:], PayloadInvalid, "got type 9"),
        (_flip(FRAME, 1), RoundRefused, "round 6 attempt 2.*replayed or out of order"),
        (_flip(FRAME, 9), RoundRefused, "round 7 attempt 3.*replayed or out of order"),
        (_flip(FRAME, 11), SignatureInvalid, "signature does not verify"),  # first body byte
        (_flip(FRAME, 50), SignatureInvalid, "signature does not verify"),  # last body byte
        (_flip(FRAME, 60), SignatureInvalid, "signature does not verify"),  # the signature
        (FRAME[:-64] + bytes(64), SignatureInvalid, "signature does not verify"),
    ],
    ids=["minus-1", "short", "no-header", "empty", "plus-1", "doubled-body", "other-kind",
         "unknown-kind", "other-round", "other-attempt", "body-first", "body-last", "signature",
         "zero-signature"],
)
def test_malformed_or_tampered_frames_are_refused(frame, error, match):
    with pytest.raises(error, match=match):
        _open(frame)


@pytest.mark.parametrize(
    "over",
    [
        {"ref": RoundRef(study_id="s2", round=7, attempt=2)},  # another study
        {"sender": "h01"},  # posted as another member
        {"roster_digest": "ce" * 32},  # made for another roster
        {"key": Ed25519PrivateKey.generate().public_key()},  # another identity
    ],
    ids=["study", "sender", "roster", "identity"],
)
def test_what_the_signature_binds_but_the_frame_does_not_carry_is_checked(over):
    with pytest.raises(SignatureInvalid, match="another sender, study or roster"):
        _open(FRAME, **over)


def test_the_coordinator_refuses_a_signed_frame_with_bad_padding_or_a_wrong_seed():
    """Well-signed but wrong inside: set padding bits in the packed words, or a self seed that
    is not the committed one."""
    cohort = Cohort.make(3, k=19)
    cohort.publish()
    roster = cohort.server_roster()
    m = cohort.members["h00"]
    good = cohort.mask("h00", np.ones(3))
    body = bytearray(good[11:-64])
    body[7] |= 0x80  # 3 cells * 19 bits = 57 bits: byte 7 holds 1 word bit and 7 padding bits
    forged = sign_frame("masked", cohort.ref, "h00", bytes(body), m.identity, roster.digest)
    with pytest.raises(RoundRefused, match="padding"):
        s.accept_masked(forged, roster, name="h00", identity=m.identity.public_key(), n_cells=3)
    cohort.accept({n: cohort.mask(n, np.ones(3)) for n in ("h00", "h01", "h02")}, 3)
    wrong = sign_frame("unmask", cohort.ref, "h00", bytes(16), m.identity, roster.digest)
    with pytest.raises(RoundRefused, match="does not match the committed one"):
        s.accept_unmask(wrong, roster, name="h00", identity=m.identity.public_key(),
                        commitment=cohort.commitment("h00"))
    assert len(cohort.answer("h00", cohort.request(["h00", "h01", "h02"]))) == 11 + 16 + 64
    assert len(m.advert) == 11 + 32 + 64  # the X25519 key; the seed commitment is masked


def test_a_frame_of_the_previous_wire_version_is_refused_by_name():
    """A member that was not upgraded signs with the version-2 context: the coordinator says
    so (409) instead of a bare signature error, and stores nothing; a member refuses a round
    state of a coordinator that speaks another version before it sends anything."""
    from common.secagg import wire

    assert wire.WIRE == 3
    unsigned = FRAME[:-64]
    old = unsigned + KEY.sign(wire._signed("masked", "s1", "h00", DIGEST, unsigned, 2))
    with pytest.raises(RoundRefused, match="speaks secure-aggregation wire version 2"):
        _open(old)
    forged = unsigned + Ed25519PrivateKey.generate().sign(
        wire._signed("masked", "s1", "h00", DIGEST, unsigned, 2))
    with pytest.raises(SignatureInvalid):  # not an old member: a bad signature
        _open(forged)


def test_a_member_refuses_a_coordinator_of_another_wire_version():
    from pathlib import Path
    from types import SimpleNamespace

    from common.errors import ConfigError
    from common.secagg.schemas import RoundState
    from participant.secagg.round import Held, _state

    old = RoundState(round=1, attempt=1, status="keys").model_dump_json(exclude_defaults=True)
    client = SimpleNamespace(get_round=lambda *a: old)
    held = Held(path=Path("/nonexistent/membership.json"))
    with pytest.raises(ConfigError, match="speaks secure-aggregation wire version 2"):
        _state(client, "s1", held, config_digest=DIGEST, modulus_bits=20, degree=3,
               threshold=2)
    assert RoundState.model_validate_json(old).wire == 2  # absent: the version before
