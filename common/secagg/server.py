"""The coordinator's side of a secure aggregation round (pure: no I/O, no clock).

The coordinator checks each participant message against the identity key registered at
enrolment and the current attempt, builds and signs the roster and the unmask request, and
finally computes the sum: ``sum(y_u) - sum(PRG(b_u))`` mod ``2**k``. Every roster vector is in
the sum (a member lost before masking restarts the round without it, so pairwise masks always
cancel); each self seed b_u comes from u itself, or, for a member lost after masking, from
``threshold`` Shamir shares held by the others, checked against u's signed commitment.
"""

from __future__ import annotations

import hashlib
import hmac

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
    MaskedBody,
    RequestBody,
    RosterBody,
    RoundRef,
    RoundRefused,
    SignedMessage,
    UnmaskBody,
    b64d,
    open_message,
    sign_message,
)
from common.secagg.participant import VerifiedRoster
from common.secagg.shares import combine_seed

__all__ = [
    "accept_advert",
    "build_roster",
    "accept_masked",
    "build_request",
    "accept_unmask",
    "reveal_sum",
]


def _check(body: RoundRef, ref: RoundRef, name: str, claimed: str, what: str) -> None:
    if body.ref() != ref.ref():
        raise RoundRefused(f"{what} is for {body.round_id}, the open attempt is {ref.round_id}")
    if claimed != name:
        raise RoundRefused(f"{what} names {claimed!r} but was sent by {name!r}")


def accept_advert(
    signed: SignedMessage, *, ref: RoundRef, name: str, identity: Ed25519PublicKey
) -> AdvertBody:
    """A key advert of ``name`` for the open attempt, signed by its registered identity."""
    body = open_message(signed, "advert", AdvertBody, identity)
    _check(body, ref, name, body.participant, "key advert")
    if b64d(body.identity_key, size=32) != identity.public_bytes_raw():
        raise RoundRefused("key advert carries another identity key than the registered one")
    b64d(body.round_key, size=32)
    return body


def build_roster(
    ref: RoundRef,
    adverts: list[SignedMessage],
    *,
    config_digest: str,
    modulus_bits: int,
    threshold: int,
    key: Ed25519PrivateKey,
) -> SignedMessage:
    ordered = sorted(adverts, key=lambda a: AdvertBody.model_validate_json(a.payload).participant)
    body = RosterBody(
        **ref.ref().model_dump(),
        config_digest=config_digest,
        modulus_bits=modulus_bits,
        threshold=threshold,
        members=ordered,
    )
    return sign_message("roster", body, key)


def roster_of(signed: SignedMessage, key: Ed25519PublicKey) -> VerifiedRoster:
    """The coordinator's own roster, re-read (its signature is checked, not trusted)."""
    body = open_message(signed, "roster", RosterBody, key)
    members = {
        a.participant: a for a in (AdvertBody.model_validate_json(m.payload) for m in body.members)
    }
    return VerifiedRoster(body, signed.digest(), members)


def accept_masked(
    signed: SignedMessage,
    roster: VerifiedRoster,
    *,
    name: str,
    identity: Ed25519PublicKey,
    n_cells: int,
) -> tuple[MaskedBody, U64]:
    """A masked vector of roster member ``name``: right attempt, roster, length and shares."""
    body = open_message(signed, "masked", MaskedBody, identity)
    _check(body, roster.body, name, body.participant, "masked vector")
    if name not in roster.members:
        raise RoundRefused(f"{name!r} is not in this attempt's roster")
    if not hmac.compare_digest(body.roster_digest, roster.digest):
        raise RoundRefused("masked vector was made for another roster")
    if sorted(body.shares) != [n for n in roster.names if n != name]:
        raise RoundRefused("masked vector must carry one sealed share for every other member")
    try:
        words = unpack_words(b64d(body.words), n_cells, roster.body.modulus_bits)
    except ValueError as exc:
        raise RoundRefused(f"masked vector: {exc}") from exc
    return body, words


def build_request(
    roster: VerifiedRoster, included: list[str], key: Ed25519PrivateKey
) -> SignedMessage:
    body = RequestBody(
        **roster.body.ref().model_dump(), roster_digest=roster.digest, included=sorted(included)
    )
    return sign_message("request", body, key)


def accept_unmask(
    signed: SignedMessage, roster: VerifiedRoster, *, name: str, identity: Ed25519PublicKey
) -> UnmaskBody:
    body = open_message(signed, "unmask", UnmaskBody, identity)
    _check(body, roster.body, name, body.participant, "unmask answer")
    if not hmac.compare_digest(body.roster_digest, roster.digest):
        raise RoundRefused("unmask answer was made for another roster")
    seed = b64d(body.self_seed, size=SELF_SEED_BYTES)
    if hashlib.sha256(seed).hexdigest() != roster.members[name].seed_commitment:
        raise RoundRefused("unmask answer: self seed does not match the committed one")
    return body


def _seed_of(name: str, roster: VerifiedRoster, answers: dict[str, UnmaskBody]) -> bytes:
    if name in answers:
        return b64d(answers[name].self_seed)
    shares = [b64d(a.shares[name]) for a in answers.values() if name in a.shares]
    try:
        seed = combine_seed(shares, roster.body.threshold)
    except ValueError as exc:
        raise RoundRefused(f"cannot recover {name}'s self mask: {exc}") from exc
    if hashlib.sha256(seed).hexdigest() != roster.members[name].seed_commitment:
        raise RoundRefused(f"recovered self seed of {name} does not match its commitment")
    return seed


def reveal_sum(
    roster: VerifiedRoster, masked: dict[str, U64], answers: dict[str, UnmaskBody]
) -> NDArray[np.int64]:
    """The cohort's sum, from every member's masked words and >= threshold unmask answers."""
    if sorted(masked) != roster.names:
        raise RoundRefused("every roster member's masked vector is needed to reveal a sum")
    if len(answers) < roster.body.threshold:
        raise RoundRefused(
            f"{len(answers)} unmask answers, the threshold is {roster.body.threshold}"
        )
    k = roster.body.modulus_bits
    mask = np.uint64((1 << k) - 1)
    n = next(iter(masked.values())).shape[0]
    total = np.zeros(n, dtype=np.uint64)
    for name in roster.names:
        total = (total + masked[name]) & mask
        self_mask = keystream_words(self_mask_key(_seed_of(name, roster, answers)), n, k)
        total = (total - self_mask) & mask
    return from_words(total, k)


__all__ += ["roster_of"]
