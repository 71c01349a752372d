"""The participant's side of a secure aggregation round up to masking (pure: no I/O, no clock).

The agent (``participant/secagg/round.py``) calls, in order: :func:`make_advert`,
:func:`check_roster` and :func:`mask_upload`; its answers after masking (unmask, recover) are in
:mod:`common.secagg.answers`. Each check refuses what an honest participant must never accept:
a forged or foreign signature, a message of another study / round / attempt (replay or
reordering), a roster whose size is outside the signed cohort parameters ``[n - D, n]`` or that
does not carry this participant's own advert unchanged, and masking another attempt once this
participant's noisy vector was unmasked in one.
"""

from __future__ import annotations

import hashlib

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
from numpy.typing import NDArray

from common.secagg.keys import RoundSecrets, ack_key, raw_public, share_aad, share_key
from common.secagg.masks import apply_masks, pack_words, pair_seed, to_words
from common.secagg.messages import (
    RosterBody,
    RoundRef,
    RoundRefused,
    SignedMessage,
    b64d,
    open_message,
)
from common.secagg.params import AggregationParams
from common.secagg.roster import (
    VerifiedRoster,
    adverts_digest,
    from_bitmap,
    read_adverts,
    unpack_for,
)
from common.secagg.shares import seal_share, split_seed
from common.secagg.wire import (
    ADVERT_BYTES,
    SIGNATURE_BYTES,
    ack_tag,
    frame_header,
    make_advert_frame,
    sign_frame,
)

ADVERT_TAIL = ADVERT_BYTES + SIGNATURE_BYTES
"""An advert frame without its header: X25519 key, signature."""

__all__ = [
    "RoundSecrets",
    "VerifiedRoster",
    "make_advert",
    "check_roster",
    "mask_upload",
    "same_ref",
    "share_key",
    "raw_public",
]


def make_advert(
    ref: RoundRef, name: str, identity: Ed25519PrivateKey, secrets: RoundSecrets
) -> bytes:
    """The advert frame: this attempt's X25519 key (deterministic)."""
    return make_advert_frame(ref, name, identity, raw_public(secrets.round_key))


def same_ref(body: RoundRef, ref: RoundRef, what: str) -> None:
    """Refuse ``body`` (a roster or a request) that names another round or attempt."""
    if body.ref() != ref.ref():
        raise RoundRefused(
            f"{what} is for {body.round_id}, expected {ref.round_id}: replayed or out of order"
        )


def verify_roster(
    signed: SignedMessage,
    *,
    coordinator_key: Ed25519PublicKey,
    ref: RoundRef,
    params: AggregationParams,
    config_digest: str,
    modulus_bits: int,
    identities: dict[str, str],
) -> VerifiedRoster:
    """Every check on a roster that does not depend on who reads it (``identities``: the
    certified members' identity keys, from the verified membership certificate)."""
    body = open_message(signed, "roster", RosterBody, coordinator_key)
    same_ref(body, ref, "roster")
    if body.config_digest != config_digest:
        raise RoundRefused("roster names another study config; fetch and verify the config")
    if (body.modulus_bits, body.degree, body.threshold) != (
            modulus_bits, params.degree, params.threshold):
        raise RoundRefused(
            "roster word size, graph degree or share threshold differs from the signed config")
    n = params.cohort_size
    floor = max(params.min_roster, params.require_h_min())
    if not floor <= body.size <= (n or 0):
        raise RoundRefused(
            f"roster has {body.size} members; the signed config allows {floor} to {n} "
            "(max(n - dropouts, h_min) to n)"
        )
    return VerifiedRoster(body, signed.digest(), from_bitmap(list(identities), body), {})


def check_roster(
    signed: SignedMessage,
    *,
    me: str,
    my_advert: bytes,
    coordinator_key: Ed25519PublicKey,
    ref: RoundRef,
    params: AggregationParams,
    config_digest: str,
    modulus_bits: int,
    identities: dict[str, str],
    adverts: str,
    beacon: bytes | None = None,
) -> VerifiedRoster:
    """:func:`verify_roster` (members named by a bitmap over the certificate, so every one is
    certified), plus: I am in it, and each of my graph neighbours' advert frames (``adverts``,
    packed in neighbour order, served beside the roster) verifies under the identity key the
    consortium certified for it; in the complete graph (a member holds every advert) the
    roster's advert digest must be theirs (in a sparse graph the beacon, which signs one
    roster per attempt, fixes the digest and with it the graph). An honest member signs one
    advert per attempt, so the keys I
    mask with are my neighbours' own whatever the coordinator does. ``beacon``: the verified
    consortium signature seeding a beacon study's graph (common.secagg.beacon)."""
    roster = verify_roster(
        signed,
        coordinator_key=coordinator_key,
        ref=ref,
        params=params,
        config_digest=config_digest,
        modulus_bits=modulus_bits,
        identities=identities,
    )
    if me not in roster.names:
        raise RoundRefused(f"roster does not name {me}")
    roster = VerifiedRoster(roster.body, roster.digest, roster.names, {}, beacon)
    frames = unpack_for(roster, me, adverts, ADVERT_TAIL, frame_header("advert", ref))
    if frames is None:
        raise RoundRefused(f"the coordinator did not serve the adverts of {me}'s "
                           f"{roster.graph.degree} graph neighbours")
    members = read_adverts(roster.body, {**frames, me: my_advert}, identities)
    if roster.graph.complete and adverts_digest({**frames, me: my_advert}) != (
            roster.body.adverts_digest):
        raise RoundRefused("the roster's advert digest is not the digest of the adverts it "
                           "names: a forged or ground roster; nothing was read")
    return VerifiedRoster(roster.body, roster.digest, roster.names, members, beacon)


def mask_upload(
    roster: VerifiedRoster,
    *,
    me: str,
    identity: Ed25519PrivateKey,
    secrets: RoundSecrets,
    noisy: NDArray[np.int64],
    unmasked_attempt: int | None = None,
) -> bytes:
    """The masked frame: ``noisy`` (counts + noise share) masked with this member's graph
    neighbours, and b_u's shares sealed for them (by name). Refused once this member has
    unmasked another attempt of the round (``unmasked_attempt``, from its durable state): its
    vector is in that sum."""
    body, k = roster.body, roster.body.modulus_bits
    if unmasked_attempt is not None and unmasked_attempt != body.attempt:
        raise RoundRefused(
            f"{me} already unmasked attempt {unmasked_attempt} of round {body.round}: its "
            "noisy vector never enters a second sum, so it masks no other attempt"
        )
    mine = roster.members[me]
    seeds: list[tuple[int, bytes]] = []
    for name in roster.holders(me):
        peer = roster.members[name]
        seed = pair_seed(
            secrets.round_key,
            X25519PublicKey.from_public_bytes(b64d(peer.round_key, size=32)),
            round_id=body.round_id,
            roster_digest=roster.digest,
            purpose=b"mask",
            my_identity=b64d(mine.identity_key),
            peer_identity=b64d(peer.identity_key),
        )
        seeds.append((1 if me < name else -1, seed))
    words = apply_masks(to_words(np.asarray(noisy, dtype=np.int64), k), secrets.self_seed, seeds, k)
    holders = roster.holders(me)
    # a roster of n - D members can have fewer neighbours than t (tiny cohorts): its seed is
    # then recovered by nobody, as with the complete graph before (the round is abandoned)
    shares = split_seed(secrets.self_seed, body.threshold, max(len(holders), body.threshold))
    sealed = b"".join(
        seal_share(
            share_key(secrets.round_key, roster.members[name], mine, body.round_id,
                      roster.digest),
            share,  # its index is the holder's place in ``holders`` + 1: not sent
            share_aad(body.round_id, me, name, roster.digest),
        )
        for name, share in zip(holders, shares, strict=False)
    )
    acks = b"".join(
        ack_tag(ack_key(secrets.round_key, roster.members[name], mine, body.round_id,
                        roster.digest), body, me, name, roster.digest)
        for name in holders)
    commitment = hashlib.sha256(secrets.self_seed).digest()
    return sign_frame("masked", body, me, pack_words(words, k) + commitment + sealed + acks,
                      identity, roster.digest)
