"""The participant's side of a secure aggregation round (pure: no I/O, no clock).

The agent (``participant/secagg/round.py``) calls, in order: :func:`make_advert`,
:func:`check_roster`, :func:`mask_upload`, :func:`answer_unmask`, and, only if members were lost
after masking, :func:`answer_recover`. Each check refuses what an honest participant must never
accept: a forged or foreign signature, a message of another study / round / attempt (replay or
reordering), a roster whose size is outside the signed cohort parameters ``[n - D, n]`` or that
does not carry this participant's own advert unchanged, and an unmask request that would reveal
a partial sum, a sum over fewer than ``h_min`` participants, or this participant's noisy vector
in a second attempt. Shares of other members' seeds are revealed only for members named in a
signed recover request of the very attempt this participant helped unmask.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
from numpy.typing import NDArray

from common.secagg.keys import RoundSecrets, raw_public, share_aad, share_key
from common.secagg.masks import apply_masks, pack_words, pair_seed, to_words
from common.secagg.membership import MembershipBody, check_certified
from common.secagg.messages import (
    RecoverBody,
    RequestBody,
    RosterBody,
    RoundRef,
    RoundRefused,
    SharesBody,
    SignedMessage,
    b64d,
    b64e,
    open_message,
    raw_ed25519,
    sign_message,
)
from common.secagg.params import AggregationParams
from common.secagg.roster import VerifiedRoster, read_members
from common.secagg.shares import ShareOpenError, open_share, seal_share, split_seed
from common.secagg.wire import make_advert_frame, sign_ack, sign_frame, verify_ack

__all__ = [
    "RoundSecrets",
    "VerifiedRoster",
    "make_advert",
    "check_roster",
    "mask_upload",
    "answer_unmask",
    "answer_recover",
    "share_key",
    "raw_public",
]


def make_advert(
    ref: RoundRef, name: str, identity: Ed25519PrivateKey, secrets: RoundSecrets
) -> bytes:
    """The advert frame: this attempt's X25519 key and a commitment to b_u (deterministic)."""
    return make_advert_frame(ref, name, identity, raw_public(secrets.round_key), secrets.self_seed)


def _same_ref(body: RoundRef, ref: RoundRef, what: str) -> None:
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
) -> VerifiedRoster:
    """Every check on a roster that does not depend on who reads it."""
    body = open_message(signed, "roster", RosterBody, coordinator_key)
    _same_ref(body, ref, "roster")
    if body.config_digest != config_digest:
        raise RoundRefused("roster names another study config; fetch and verify the config")
    if body.modulus_bits != modulus_bits or body.threshold != params.threshold:
        raise RoundRefused("roster word size or threshold differs from the signed config")
    n = params.cohort_size
    if not params.min_roster <= len(body.members) <= (n or 0):
        raise RoundRefused(
            f"roster has {len(body.members)} members; the signed config allows "
            f"{params.min_roster} to {n} (n - dropouts to n)"
        )
    return VerifiedRoster(body, signed.digest(), read_members(body))


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
    certified: MembershipBody | None = None,
) -> VerifiedRoster:
    """:func:`verify_roster`, plus: my own advert is in it, byte for byte, and (with
    ``certified``, the verified consortium certificate) every member is certified with the
    identity key the roster lists and the roster has at least ``max(n - D, h_min)`` members."""
    roster = verify_roster(
        signed,
        coordinator_key=coordinator_key,
        ref=ref,
        params=params,
        config_digest=config_digest,
        modulus_bits=modulus_bits,
    )
    mine = [m for m in roster.body.members if m.participant == me]
    if not mine or mine[0].advert != b64e(my_advert):
        raise RoundRefused(f"roster does not carry {me}'s advert as {me} sent it")
    if certified is not None:
        check_certified(roster, certified, params)
    return roster


def mask_upload(
    roster: VerifiedRoster,
    *,
    me: str,
    identity: Ed25519PrivateKey,
    secrets: RoundSecrets,
    noisy: NDArray[np.int64],
    unmasked_attempt: int | None = None,
) -> bytes:
    """The masked frame: ``noisy`` (counts + noise share) masked, and b_u's shares sealed for
    the other members (roster order). Refused once this member has unmasked another attempt
    of the round (``unmasked_attempt``, from its durable state): its vector is in that sum."""
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
            purpose=b"mask",
            my_identity=b64d(mine.identity_key),
            peer_identity=b64d(peer.identity_key),
        )
        seeds.append((1 if me < name else -1, seed))
    words = apply_masks(to_words(np.asarray(noisy, dtype=np.int64), k), secrets.self_seed, seeds, k)
    shares = dict(zip(roster.names, split_seed(secrets.self_seed, body.threshold,
                                                len(roster.names)), strict=True))
    sealed = b"".join(
        seal_share(
            share_key(secrets.round_key, roster.members[name], mine, body.round_id),
            shares[name],  # its index is the holder's roster position + 1: not sent
            share_aad(body.round_id, me, name),
        )
        for name in roster.holders(me)
    )
    ack = sign_ack(body, me, roster.digest, identity)
    return sign_frame("masked", body, me, pack_words(words, k) + sealed + ack, identity,
                      roster.digest)


def answer_unmask(
    signed: SignedMessage,
    roster: VerifiedRoster,
    *,
    me: str,
    identity: Ed25519PrivateKey,
    secrets: RoundSecrets,
    coordinator_key: Ed25519PublicKey,
    params: AggregationParams,
    unmasked_attempt: int | None,
    record: Callable[[int], None],
) -> bytes:
    """Answer an unmask request with b_u (the unmask frame), or refuse it.

    ``unmasked_attempt`` is the attempt of this round that this participant already helped
    unmask (from its durable state); ``record(attempt)`` must persist the new one durably and
    is called before the answer exists, so a crash can never leave an answer unrecorded.
    """
    request = open_message(signed, "request", RequestBody, coordinator_key)
    _same_ref(request, roster.body, "unmask request")
    if request.roster_digest != roster.digest:
        raise RoundRefused("unmask request names another roster")
    if sorted(request.included) != roster.names:
        raise RoundRefused(
            "unmask request does not include every roster member's vector: a partial sum is "
            "never revealed (the round must restart without the missing members)"
        )
    for name in roster.names:  # split view: every member masked under MY roster
        ack = request.acks.get(name)
        key = raw_ed25519(roster.members[name].identity_key)
        if ack is None or not verify_ack(b64d(ack), roster.body, name, roster.digest, key):
            raise RoundRefused(
                f"{name} did not acknowledge the roster {me} masked under: the coordinator "
                "may have shown members different rosters (split view); no unmask answer "
                "leaves")
    h_min = params.require_h_min()
    if len(request.included) < max(h_min, params.min_roster):
        raise RoundRefused(f"refusing to reveal a sum over fewer than {h_min} participants")
    if unmasked_attempt is not None and unmasked_attempt != request.attempt:
        raise RoundRefused(
            f"this participant's noisy vector was already unmasked in attempt "
            f"{unmasked_attempt} of round {request.round}; it never enters a second sum"
        )
    record(request.attempt)
    return sign_frame("unmask", request, me, secrets.self_seed, identity, roster.digest)


def answer_recover(
    signed: SignedMessage,
    roster: VerifiedRoster,
    *,
    me: str,
    identity: Ed25519PrivateKey,
    secrets: RoundSecrets,
    inbox: dict[str, str],
    coordinator_key: Ed25519PublicKey,
    unmasked_attempt: int | None,
) -> SignedMessage:
    """The shares this member holds of the seeds of members lost after masking.

    Only for the attempt this member itself helped unmask (so a recovered seed can only
    complete the one sum it agreed to), and only for roster members other than itself."""
    request = open_message(signed, "recover", RecoverBody, coordinator_key)
    _same_ref(request, roster.body, "recover request")
    if request.roster_digest != roster.digest:
        raise RoundRefused("recover request names another roster")
    if unmasked_attempt != request.attempt:
        raise RoundRefused(
            f"{me} did not answer the unmask request of attempt {request.attempt}: it reveals "
            "no shares for it"
        )
    missing = set(request.missing)
    if me in missing or not missing <= set(roster.names):
        raise RoundRefused("recover request names members outside the roster, or me")
    mine = roster.members[me]
    held: dict[str, str] = {}
    for owner in sorted(missing):
        if owner not in inbox:
            raise RoundRefused(f"no share of {owner}'s seed was forwarded; cannot recover it")
        key = share_key(secrets.round_key, roster.members[owner], mine, request.round_id)
        try:
            share = open_share(key, b64d(inbox[owner]), share_aad(request.round_id, owner, me))
        except ShareOpenError as exc:
            raise RoundRefused(
                f"the share of {owner}'s seed does not authenticate for {me} in "
                f"{request.round_id}: altered, replayed or misrouted"
            ) from exc
        held[owner] = b64e(share)
    body = SharesBody(
        **request.ref().model_dump(), participant=me, roster_digest=roster.digest, shares=held
    )
    return sign_message("shares", body, identity)
