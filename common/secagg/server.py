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
    RoundRef,
    RoundRefused,
    SignedMessage,
    open_message,
    sign_message,
)
from common.secagg.roster import (
    VerifiedRoster,
    adverts_digest,
    from_bitmap,
    pack_for,
    read_adverts,
    to_bitmap,
)
from common.secagg.shares import combine_seed
from common.secagg.wire import (
    ACK_TAG_BYTES,
    COMMITMENT_BYTES,
    HEADER_BYTES,
    SEALED_SHARE_BYTES,
    SIGNATURE_BYTES,
    open_advert,
    open_frame,
)

__all__ = [
    "accept_advert",
    "build_roster",
    "roster_of",
    "accept_masked",
    "sealed_share",
    "commitment_of",
    "build_request",
    "neighbour_acks",
    "neighbour_adverts",
    "accept_unmask",
    "build_recover",
    "accept_shares",
    "helped",
    "helpers",
    "unrecoverable",
    "reveal_sum",
]


def accept_advert(
    frame: bytes, *, ref: RoundRef, name: str, identity: Ed25519PublicKey
) -> AdvertBody:
    """A key advert of ``name`` for the open attempt, signed by its registered identity."""
    return open_advert(frame, ref=ref, sender=name, identity=identity.public_bytes_raw())


def build_roster(
    ref: RoundRef,
    adverts: dict[str, bytes],
    *,
    universe: list[str],
    config_digest: str,
    modulus_bits: int,
    threshold: int,
    key: Ed25519PrivateKey,
    degree: int,
) -> SignedMessage:
    """``adverts``: name -> its accepted advert frame; ``universe``: the certified members;
    ``degree``: the study's masking-graph degree (``AggregationParams.degree``)."""
    body = RosterBody(
        **ref.ref().model_dump(),
        config_digest=config_digest,
        modulus_bits=modulus_bits,
        degree=degree,
        threshold=threshold,
        size=len(adverts),
        members=to_bitmap(universe, list(adverts)),
        adverts_digest=adverts_digest(adverts),
    )
    return sign_message("roster", body, key)


def roster_of(signed: SignedMessage, key: Ed25519PublicKey, adverts: dict[str, bytes],
              identities: dict[str, str]) -> VerifiedRoster:
    """The coordinator's own roster, re-read with every member's stored advert frame (the
    roster's signature and advert digest are checked, not trusted; each advert was verified
    when it was accepted; ``identities``: the certified members' keys)."""
    body = open_message(signed, "roster", RosterBody, key)
    names = from_bitmap(list(identities), body)
    frames = {name: adverts[name] for name in names}
    if adverts_digest(frames) != body.adverts_digest:
        raise RoundRefused("stored adverts do not match the roster's advert digest")
    members = read_adverts(body, frames, identities, verified=True)  # checked when accepted
    return VerifiedRoster(body, signed.digest(), names, members)


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
    try:
        return unpack_words(body[:size], n_cells, k)
    except ValueError as exc:
        raise RoundRefused(f"masked vector: {exc}") from exc


def commitment_of(frame: bytes, roster: VerifiedRoster, n_cells: int) -> bytes:
    """The seed commitment (SHA-256 of b_u) in an accepted masked frame."""
    start = HEADER_BYTES + _words_size(n_cells, roster.body.modulus_bits)
    return frame[start : start + COMMITMENT_BYTES]


def sealed_share(frame: bytes, roster: VerifiedRoster, *, owner: str, holder: str,
                 n_cells: int) -> bytes:
    """The share of ``owner``'s seed sealed for ``holder`` in ``owner``'s accepted frame."""
    start = HEADER_BYTES + _words_size(n_cells, roster.body.modulus_bits) + COMMITMENT_BYTES
    at = start + SEALED_SHARE_BYTES * roster.holders(owner).index(holder)
    return frame[at : at + SEALED_SHARE_BYTES]


def masked_ack(frame: bytes, roster: VerifiedRoster, *, owner: str, holder: str) -> bytes:
    """The acknowledgement tag ``owner``'s accepted masked frame addresses to ``holder``."""
    tags = roster.graph.degree * ACK_TAG_BYTES
    at = len(frame) - SIGNATURE_BYTES - tags + ACK_TAG_BYTES * roster.holders(owner).index(
        holder)
    return frame[at : at + ACK_TAG_BYTES]


def build_request(roster: VerifiedRoster, included: int, key: Ed25519PrivateKey
                  ) -> SignedMessage:
    """The unmask request: ``included`` masked vectors (every roster member's) are in."""
    return sign_message("request", RequestBody(**_for(roster), included=included), key)


def neighbour_acks(roster: VerifiedRoster, me: str, masked: dict[str, bytes]) -> str:
    """The roster acknowledgements ``me``'s graph neighbours addressed to it, from their
    accepted masked frames (name -> frame), packed in neighbour order: what ``me`` checks
    before it answers the unmask request (empty until every neighbour's frame is in)."""
    if not set(roster.holders(me)) <= set(masked):
        return ""
    return pack_for(roster, me, {n: masked_ack(masked[n], roster, owner=n, holder=me)
                                 for n in roster.holders(me)})


def neighbour_adverts(roster: VerifiedRoster, me: str, adverts: dict[str, bytes]) -> str:
    """``me``'s graph neighbours' advert frames, packed in neighbour order, headers left out
    (96 bytes each: X25519 key, signature)."""
    return pack_for(roster, me, adverts, HEADER_BYTES)


def _for(roster: VerifiedRoster) -> dict[str, Any]:
    return {**roster.body.ref().model_dump(), "roster_digest": roster.digest}


def accept_unmask(frame: bytes, roster: VerifiedRoster, *, name: str,
                  identity: Ed25519PublicKey, commitment: bytes) -> bytes:
    """``name``'s self seed b_u, checked against the commitment in its masked frame
    (:func:`commitment_of`)."""
    seed = open_frame(frame, "unmask", SELF_SEED_BYTES, ref=roster.body, sender=name,
                      key=identity, roster_digest=roster.digest)
    if hashlib.sha256(seed).digest() != commitment:
        raise RoundRefused("unmask answer: self seed does not match the committed one")
    return seed


def build_recover(
    roster: VerifiedRoster, missing: list[str], key: Ed25519PrivateKey
) -> SignedMessage:
    """The recover request: send your shares of these members' seeds."""
    return sign_message("recover", RecoverBody(**_for(roster), missing=sorted(missing)), key)


def accept_shares(
    frame: bytes,
    roster: VerifiedRoster,
    *,
    name: str,
    identity: Ed25519PublicKey,
    missing: list[str],
) -> dict[str, bytes]:
    """A holder's shares frame: missing member -> its 16-byte share, exactly one for each of
    the ``missing`` members that are its graph neighbours (frame length, signature over study,
    sender and roster digest all checked)."""
    owners = helped(roster, name, missing)
    body = open_frame(frame, "shares", SELF_SEED_BYTES * len(owners), ref=roster.body,
                      sender=name, key=identity, roster_digest=roster.digest)
    return {o: body[i * SELF_SEED_BYTES:(i + 1) * SELF_SEED_BYTES]
            for i, o in enumerate(owners)}


def helped(roster: VerifiedRoster, holder: str, missing: list[str]) -> list[str]:
    """The missing members whose seed shares ``holder`` holds (its graph neighbours)."""
    return sorted(set(missing) & set(roster.holders(holder)))


def helpers(roster: VerifiedRoster, answered: set[str], missing: list[str]) -> list[str]:
    """Members that answered the unmask and hold a share of some missing member's seed."""
    return sorted({h for m in missing for h in roster.holders(m) if h in answered})


def unrecoverable(roster: VerifiedRoster, answered: set[str], missing: list[str]) -> list[str]:
    """Missing members with fewer than ``threshold`` answering neighbours."""
    t = roster.body.threshold
    return [m for m in missing if len(answered & set(roster.holders(m))) < t]


def _seed_of(
    name: str, roster: VerifiedRoster, seeds: dict[str, bytes],
    shares: dict[str, dict[str, bytes]], commitments: dict[str, bytes]
) -> bytes:
    if name in seeds:
        return seeds[name]
    neighbours = set(roster.holders(name))
    held = {roster.share_index(name, h): got[name]
            for h, got in shares.items() if h in neighbours and name in got}
    try:
        seed = combine_seed(held, roster.body.threshold)
    except ValueError as exc:
        raise RoundRefused(f"cannot recover {name}'s self mask: {exc}") from exc
    if hashlib.sha256(seed).digest() != commitments.get(name):
        raise RoundRefused(f"recovered self seed of {name} does not match its commitment")
    return seed


def reveal_sum(
    roster: VerifiedRoster,
    masked: dict[str, U64],
    seeds: dict[str, bytes],
    shares: dict[str, dict[str, bytes]] | None = None,
    commitments: dict[str, bytes] | None = None,
) -> NDArray[np.int64]:
    """The cohort's sum, from every member's masked words, the self seeds of those that
    answered, and, for each member lost after masking, at least ``threshold`` shares of its
    seed from its graph neighbours, checked against its commitment (``commitments``: name ->
    :func:`commitment_of` its masked frame)."""
    if sorted(masked) != roster.names:
        raise RoundRefused("every roster member's masked vector is needed to reveal a sum")
    k = roster.body.modulus_bits
    mask = np.uint64((1 << k) - 1)
    n = next(iter(masked.values())).shape[0]
    total = np.zeros(n, dtype=np.uint64)
    for name in roster.names:
        total = (total + masked[name]) & mask
        seed = _seed_of(name, roster, seeds, shares or {}, commitments or {})
        total = (total - keystream_words(self_mask_key(seed), n, k)) & mask
    return from_words(total, k)
