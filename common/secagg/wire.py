"""Binary frames of a member's round messages (advert, masked, unmask): the bytes it sends.

::

    frame = kind (1 byte) | round (8, little-endian) | attempt (2, LE) | body | signature (64)

The Ed25519 signature (the member's long-term identity key) covers
``b"fedod-secagg/<kind>/3\\x00" + study + b"\\x00" + sender + b"\\x00" + roster digest + frame
without its signature``. Study, sender and roster digest (32 raw bytes; none in an advert) are
bound by the signature but not sent: the URL names the study, the credential the sender, and
the coordinator holds the roster. A frame replayed into another study, round, attempt or
roster, or passed off as another member's, therefore does not verify. Each kind has exactly one
body length for a given round (fixed by the signed config and the roster), so parsing is exact:
a truncated, padded or oversized frame is refused before its signature is checked.

    advert  X25519 round key (32)
    masked  masked words packed to k bits (ceil(cells * k / 8)) | SHA-256 of the self-mask seed
            b_u (32: the commitment its unmask answer and recovered seed are checked against;
            in the masked frame, not the advert, so that members reading their neighbours'
            adverts do not read it) | b_u's Shamir share sealed for
            each other member (32: AES-SIV tag + 16 bytes; roster order; the share's index is
            the holder's roster position + 1, so it is not sent)
            | the member's acknowledgement of the roster to each graph neighbour (16 bytes
            each, in the same order): HMAC-SHA256, truncated, under the key the two share
            for that roster (X25519 + HKDF, bound to the roster digest), over ``b"fedod-secagg/
            ack/3\x00" + study + sender + recipient + round + attempt + roster digest``.
            The coordinator serves each member the tags its neighbours addressed to it; a
            member answers the unmask request only if each checks, so two members shown
            different rosters (a split view) are detected before any unmask answer leaves
            (Bonawitz et al., CCS 2017, ConsistencyCheck; a MAC serves as well as a signature
            here: only the two ends hold the key, and each checks for itself).
    unmask  b_u itself (16)
    shares  (recover phase only) the sender's 16-byte shares of the seeds of the lost members
            it neighbours in the masking graph, in name order (their Shamir indices follow
            from the graph)

JSON with base64 would add a third to every frame (and names and field labels besides).
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from typing import Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from common.errors import PayloadInvalid, PayloadTooLarge, SignatureInvalid
from common.secagg.messages import AdvertBody, RoundRef, RoundRefused, b64e

__all__ = [
    "FrameKind",
    "SIGNATURE_BYTES",
    "HEADER_BYTES",
    "OCTET_STREAM",
    "SEALED_SHARE_BYTES",
    "frame_size",
    "sign_frame",
    "open_frame",
    "make_advert_frame",
    "open_advert",
    "frame_digest",
    "frame_header",
    "ACK_TAG_BYTES",
    "ADVERT_BYTES",
    "COMMITMENT_BYTES",
    "ack_tag",
    "check_ack_tag",
    "WIRE",
]

WIRE = 3
"""The secure-aggregation wire version: in every frame's signature context, in each round
state (``RoundState.wire``), checked by both sides. 3: pairwise masks, share keys and
acknowledgement keys bound to the roster digest; one 16-byte acknowledgement tag per graph
neighbour instead of one signature. A frame of version 2 is refused by name."""

FrameKind = Literal["advert", "masked", "unmask", "shares"]
_CODES: dict[str, int] = {"advert": 1, "masked": 2, "unmask": 3, "shares": 4}
_HEADER = struct.Struct("<BQH")
HEADER_BYTES = _HEADER.size
SIGNATURE_BYTES = 64
SEALED_SHARE_BYTES = 32
ACK_TAG_BYTES = 16
ADVERT_BYTES = 32  # an advert's body: the attempt's X25519 key
COMMITMENT_BYTES = 32  # SHA-256 of the self-mask seed, after the masked words
OCTET_STREAM = "application/octet-stream"


def frame_size(body_size: int) -> int:
    return _HEADER.size + body_size + SIGNATURE_BYTES


def frame_digest(frame: bytes) -> str:
    return hashlib.sha256(frame).hexdigest()


def _signed(
    kind: str, study: str, sender: str, roster_digest: str | None, unsigned: bytes,
    version: int = WIRE,
) -> bytes:
    digest = bytes.fromhex(roster_digest) if roster_digest else b""
    head = b"fedod-secagg/" + kind.encode("ascii") + f"/{version}\x00".encode()
    return head + study.encode() + b"\x00" + sender.encode() + b"\x00" + digest + unsigned


def _outdated(kind: str, sender: str, signature: bytes, key: Ed25519PublicKey,
              old: bytes) -> RoundRefused | None:
    """A clear refusal when a frame verifies under the previous wire version's context."""
    try:
        key.verify(signature, old)
    except InvalidSignature:
        return None
    return RoundRefused(
        f"{kind} frame of {sender} speaks secure-aggregation wire version {WIRE - 1}; this "
        f"coordinator speaks version {WIRE} (masks bound to the roster): upgrade "
        "fedod-participant on that member; nothing of it was stored")


def frame_header(kind: FrameKind, ref: RoundRef) -> bytes:
    """The 11 bytes every ``kind`` frame of the attempt ``ref`` starts with."""
    return _HEADER.pack(_CODES[kind], ref.round, ref.attempt)


def sign_frame(
    kind: FrameKind,
    ref: RoundRef,
    sender: str,
    body: bytes,
    key: Ed25519PrivateKey,
    roster_digest: str | None = None,
) -> bytes:
    unsigned = frame_header(kind, ref) + body
    return unsigned + key.sign(_signed(kind, ref.study_id, sender, roster_digest, unsigned))


def open_frame(
    frame: bytes,
    kind: FrameKind,
    body_size: int,
    *,
    ref: RoundRef,
    sender: str,
    key: Ed25519PublicKey,
    roster_digest: str | None = None,
) -> bytes:
    """The body of a ``kind`` frame of ``sender`` for the attempt ``ref``; refused otherwise,
    checked in this order:

    PayloadInvalid (422) when shorter than a header or of another kind; RoundRefused (409) for
    another round or attempt (replayed or out of order); PayloadTooLarge (413) when longer
    than this kind is in this round, PayloadInvalid (422) when shorter (truncated);
    SignatureInvalid (422) when the signature does not verify (tampered bytes, another sender,
    study or roster)."""
    size = frame_size(body_size)
    if len(frame) < _HEADER.size:
        raise PayloadInvalid(f"{kind} frame is {len(frame)} bytes (truncated); expected {size}")
    code, rnd, attempt = _HEADER.unpack_from(frame)
    if code != _CODES[kind]:
        raise PayloadInvalid(f"expected a {kind} frame (type {_CODES[kind]}), got type {code}")
    if (rnd, attempt) != (ref.round, ref.attempt):
        raise RoundRefused(
            f"{kind} frame is for round {rnd} attempt {attempt}, the open attempt is "
            f"{ref.round_id}: replayed or out of order"
        )
    if len(frame) > size:
        raise PayloadTooLarge(f"{kind} frame is {len(frame)} bytes; this round's is {size}")
    if len(frame) < size:
        raise PayloadInvalid(f"{kind} frame is {len(frame)} bytes (truncated); expected {size}")
    unsigned, signature = frame[:-SIGNATURE_BYTES], frame[-SIGNATURE_BYTES:]
    try:
        key.verify(signature, _signed(kind, ref.study_id, sender, roster_digest, unsigned))
    except InvalidSignature as exc:
        old = _signed(kind, ref.study_id, sender, roster_digest, unsigned, WIRE - 1)
        if (outdated := _outdated(kind, sender, signature, key, old)) is not None:
            raise outdated from exc
        raise SignatureInvalid(
            f"{kind} frame of {sender}: signature does not verify (altered bytes, another "
            "sender, study or roster)"
        ) from exc
    return unsigned[_HEADER.size :]


def ack_tag(key: bytes, ref: RoundRef, sender: str, recipient: str, roster_digest: str
            ) -> bytes:
    """``sender``'s acknowledgement to ``recipient`` that it masked under the roster
    ``roster_digest``: HMAC-SHA256 truncated to 16 bytes under the key the two members share
    for that roster (:func:`common.secagg.keys.ack_key`). Only the two can make it; a sender
    shown another roster derives another key, so its tag does not check."""
    message = (b"fedod-secagg/ack/3\x00" + ref.study_id.encode() + b"\x00" + sender.encode()
               + b"\x00" + recipient.encode() + b"\x00" + struct.pack("<QH", ref.round,
                                                                        ref.attempt)
               + bytes.fromhex(roster_digest))
    return hmac.new(key, message, hashlib.sha256).digest()[:ACK_TAG_BYTES]


def check_ack_tag(tag: bytes, key: bytes, ref: RoundRef, sender: str, recipient: str,
                  roster_digest: str) -> bool:
    return hmac.compare_digest(tag, ack_tag(key, ref, sender, recipient, roster_digest))


def make_advert_frame(ref: RoundRef, sender: str, identity: Ed25519PrivateKey, round_key: bytes
                      ) -> bytes:
    return sign_frame("advert", ref, sender, round_key, identity)


def open_advert(frame: bytes, *, ref: RoundRef, sender: str, identity: bytes) -> AdvertBody:
    """An advert frame read into its fields (identity: the sender's raw Ed25519 key)."""
    try:
        key = Ed25519PublicKey.from_public_bytes(identity)
    except ValueError as exc:
        raise SignatureInvalid(f"identity key of {sender} is not an Ed25519 key") from exc
    body = open_frame(frame, "advert", ADVERT_BYTES, ref=ref, sender=sender, key=key)
    return AdvertBody(**ref.ref().model_dump(), participant=sender,
                      identity_key=b64e(identity), round_key=b64e(body))
