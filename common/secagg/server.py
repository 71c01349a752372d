"""The coordinator's side of a secure aggregation round (pure: no I/O, no clock).

The coordinator checks each member's frame (:mod:`.wire`) against the identity key registered
at enrolment, the open attempt and its roster, builds and signs the roster, the unmask request
and (only when members were lost after masking) the recover request, and finally computes the
sum: ``sum(y_u) - sum(PRG(b_u))`` mod ``2**k``. Every roster vector is in the sum (a member
lost before masking restarts the round without it, so pairwise masks always cancel); each self
seed b_u comes from u itself, or, for a member lost after masking, from ``threshold`` Shamir
shares held by the others, checked against u's signed commitment.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from numpy.typing import NDArray

from common.secagg.masks import (
    SELF_SEED_BYTES,
    U64,
    from_words,
    keystream_words,
    self_mask_key,
    unpack_words,
)
from common.secagg.messages import (
    AdvertBody,
    RecoverBody,
    RequestBody,
    RosterBody,
    RosterMember,
    RoundRef,
    RoundRefused,
    SharesBody,
    SignedMessage,
    b64d,
    b64e,
    open_message,
    sign_message,
)
from common.secagg.roster import VerifiedRoster, read_members
from common.secagg.shares import combine_seed
from common.secagg.wire import (
    ACK_BYTES,
    HEADER_BYTES,
    SEALED_SHARE_BYTES,
    SIGNATURE_BYTES,
    open_advert,
    open_frame,
    verify_ack,
)

__all__ = [
    "accept_advert",
    "build_roster",
    "roster_of",
    "accept_masked",
    "sealed_share",
    "build_request",
    "accept_unmask",
    "build_recover",
    "accept_shares",
    "reveal_sum",
]


def accept_advert(
    frame: bytes, *, ref: RoundRef, name: str, identity: Ed25519PublicKey
) -> AdvertBody:
    """A key advert of ``name`` for the open attempt, signed by its registered identity."""
    return open_advert(frame, ref=ref, sender=name, identity=identity.public_bytes_raw())


def build_roster(
    ref: RoundRef,
    adverts: dict[str, tuple[Ed25519PublicKey, bytes]],
    *,
    config_digest: str,
    modulus_bits: int,
    threshold: int,
    key: Ed25519PrivateKey,
) -> SignedMessage:
    """``adverts``: name -> (registered identity key, advert frame)."""
    members = [
        RosterMember(participant=name, identity_key=b64e(ident.public_bytes_raw()),
                     advert=b64e(frame))
        for name, (ident, frame) in sorted(adverts.items())
    ]
    body = RosterBody(
        **ref.ref().model_dump(),
        config_digest=config_digest,
        modulus_bits=modulus_bits,
        threshold=threshold,
        members=members,
    )
    return sign_message("roster", body, key)


def roster_of(signed: SignedMessage, key: Ed25519PublicKey) -> VerifiedRoster:
    """The coordinator's own roster, re-read (its signature is checked, not trusted)."""
    body = open_message(signed, "roster", RosterBody, key)
    return VerifiedRoster(body, signed.digest(), read_members(body))


def _words_size(n_cells: int, k: int) -> int:
    return -(-n_cells * k // 8)


def accept_masked(
    frame: bytes,
    roster: VerifiedRoster,
    *,
    name: str,
    identity: Ed25519PublicKey,
    n_cells: int,
) -> U64:
    """The masked words of roster member ``name``: right attempt, roster, length, signature."""
    if name not in roster.members:
        raise RoundRefused(f"{name!r} is not in this attempt's roster")
    k = roster.body.modulus_bits
    size = _words_size(n_cells, k)
    body = open_frame(frame, "masked", size + roster.shares_size(), ref=roster.body,
                      sender=name, key=identity, roster_digest=roster.digest)
    if not verify_ack(body[-ACK_BYTES:], roster.body, name, roster.digest, identity):
        raise RoundRefused(f"masked frame of {name}: its roster acknowledgement does not verify")
    try:
        return unpack_words(body[:size], n_cells, k)
    except ValueError as exc:
        raise RoundRefused(f"masked vector: {exc}") from exc


def sealed_share(frame: bytes, roster: VerifiedRoster, *, owner: str, holder: str,
                 n_cells: int) -> bytes:
    """The share of ``owner``'s seed sealed for ``holder`` in ``owner``'s accepted frame."""
    start = HEADER_BYTES + _words_size(n_cells, roster.body.modulus_bits)
    at = start + SEALED_SHARE_BYTES * roster.holders(owner).index(holder)
    return frame[at : at + SEALED_SHARE_BYTES]


def masked_ack(frame: bytes) -> bytes:
    """The roster acknowledgement carried by an accepted masked frame."""
    return frame[-(ACK_BYTES + SIGNATURE_BYTES) : -SIGNATURE_BYTES]


def build_request(
    roster: VerifiedRoster,
    included: list[str],
    key: Ed25519PrivateKey,
    masked: dict[str, bytes] | None = None,
) -> SignedMessage:
    """The unmask request: every member in ``included`` is in the sum; with every accepted
    masked frame's roster acknowledgement (``masked``: name -> frame)."""
    acks = {name: b64e(masked_ack(frame)) for name, frame in (masked or {}).items()}
    body = RequestBody(**_for(roster), included=sorted(included), acks=acks)
    return sign_message("request", body, key)


def _for(roster: VerifiedRoster) -> dict[str, Any]:
    return {**roster.body.ref().model_dump(), "roster_digest": roster.digest}


def accept_unmask(
    frame: bytes, roster: VerifiedRoster, *, name: str, identity: Ed25519PublicKey
) -> bytes:
    """``name``'s self seed b_u, checked against the commitment in its advert."""
    seed = open_frame(frame, "unmask", SELF_SEED_BYTES, ref=roster.body, sender=name,
                      key=identity, roster_digest=roster.digest)
    if hashlib.sha256(seed).hexdigest() != roster.members[name].seed_commitment:
        raise RoundRefused("unmask answer: self seed does not match the committed one")
    return seed


def build_recover(
    roster: VerifiedRoster, missing: list[str], key: Ed25519PrivateKey
) -> SignedMessage:
    """The recover request: send your shares of these members' seeds."""
    return sign_message("recover", RecoverBody(**_for(roster), missing=sorted(missing)), key)


def accept_shares(
    signed: SignedMessage,
    roster: VerifiedRoster,
    *,
    name: str,
    identity: Ed25519PublicKey,
    missing: list[str],
) -> SharesBody:
    """A holder's shares of exactly the ``missing`` members' seeds, 16 bytes each."""
    body = open_message(signed, "shares", SharesBody, identity)
    if body.ref() != roster.body.ref() or body.participant != name:
        raise RoundRefused(f"shares answer is for {body.round_id} from {body.participant!r}")
    if body.roster_digest != roster.digest:
        raise RoundRefused("shares answer was made for another roster")
    if sorted(body.shares) != sorted(missing):
        raise RoundRefused("shares answer must carry one share of each missing member's seed")
    for share in body.shares.values():
        b64d(share, size=SELF_SEED_BYTES)
    return body


def _seed_of(
    name: str, roster: VerifiedRoster, seeds: dict[str, bytes], shares: dict[str, SharesBody]
) -> bytes:
    if name in seeds:
        return seeds[name]
    held = {roster.position(h): b64d(a.shares[name])
            for h, a in shares.items() if name in a.shares}
    try:
        seed = combine_seed(held, roster.body.threshold)
    except ValueError as exc:
        raise RoundRefused(f"cannot recover {name}'s self mask: {exc}") from exc
    if hashlib.sha256(seed).hexdigest() != roster.members[name].seed_commitment:
        raise RoundRefused(f"recovered self seed of {name} does not match its commitment")
    return seed


def reveal_sum(
    roster: VerifiedRoster,
    masked: dict[str, U64],
    seeds: dict[str, bytes],
    shares: dict[str, SharesBody] | None = None,
) -> NDArray[np.int64]:
    """The cohort's sum, from every member's masked words, >= threshold self seeds, and the
    survivors' shares of the seeds of members lost after masking."""
    if sorted(masked) != roster.names:
        raise RoundRefused("every roster member's masked vector is needed to reveal a sum")
    if len(seeds) < roster.body.threshold:
        raise RoundRefused(f"{len(seeds)} unmask answers, the threshold is {roster.body.threshold}")
    k = roster.body.modulus_bits
    mask = np.uint64((1 << k) - 1)
    n = next(iter(masked.values())).shape[0]
    total = np.zeros(n, dtype=np.uint64)
    for name in roster.names:
        total = (total + masked[name]) & mask
        seed = _seed_of(name, roster, seeds, shares or {})
        total = (total - keystream_words(self_mask_key(seed), n, k)) & mask
    return from_words(total, k)
