"""A member's view of a round, compact: the signed round messages without what it knows.

The coordinator signs the roster, the unmask request and the recover request over their full
canonical JSON bodies (:mod:`common.secagg.messages`). A member already knows several fields
of each: the study, round and attempt (it asked for them, and the state names round and
attempt), the config digest, word size, graph degree and share threshold (from the config it
verified), the roster size (the bits set in the roster's member bitmap), the roster digest
(it holds the roster) and, in a recover request, the lost members it is asked about (the keys
of its inbox). The
coordinator serves each signed message with those fields left out of the payload
(:func:`compact`); the member puts its own values back and rebuilds the canonical payload
(:func:`complete`) before it verifies the signature, so a coordinator that signed other values
is refused exactly as before. Nothing is trusted that was not signed.
"""

from __future__ import annotations

import base64
import binascii
import json

from pydantic import BaseModel

from common.secagg.messages import RecoverBody, RequestBody, RosterBody, SignedMessage
from common.secagg.schemas import RoundState
from common.study.canonical import canonical_json

__all__ = ["KNOWN", "ROSTER_PHASES", "compact", "complete", "complete_state"]

_REF = ("study_id", "round", "attempt")
KNOWN: dict[str, tuple[str, ...]] = {
    "roster": (*_REF, "config_digest", "modulus_bits", "degree", "threshold", "size"),
    "request": (*_REF, "roster_digest"),
    "recover": (*_REF, "roster_digest", "missing"),
}
"""Per kind of signed message: the body fields a member fills in itself."""
ROSTER_PHASES = ("masking", "unmask", "recover")
"""Phases whose state names the attempt's roster (left out when the caller holds it)."""
_BODIES: dict[str, type[BaseModel]] = {
    "roster": RosterBody, "request": RequestBody, "recover": RecoverBody}


def compact(signed: SignedMessage) -> SignedMessage:
    """``signed`` with the fields in :data:`KNOWN` left out of its payload (signature kept)."""
    body = json.loads(signed.payload)
    rest = {k: v for k, v in body.items() if k not in KNOWN[signed.kind]}
    return signed.model_copy(
        update={"payload": json.dumps(rest, sort_keys=True, separators=(",", ":"))})


def complete(signed: SignedMessage, **known: object) -> SignedMessage:
    """The full signed message from a compact one and the member's own values of the fields in
    :data:`KNOWN` (they replace anything the payload carries for them). Raises ValueError
    (pydantic) if the result is not a valid body; the signature is checked by the caller."""
    fields = KNOWN[signed.kind]
    if set(known) != set(fields):
        raise TypeError(f"a {signed.kind} needs exactly {fields}, got {sorted(known)}")
    body = _BODIES[signed.kind].model_validate({**json.loads(signed.payload), **known})
    return signed.model_copy(update={"payload": canonical_json(body).decode("utf-8")})


def popcount(bitmap: str) -> int:
    """Members in a roster bitmap (base64; 0 when malformed: the signature check refuses)."""
    try:
        return sum(bin(b).count("1") for b in base64.b64decode(bitmap, validate=True))
    except (binascii.Error, ValueError):
        return 0


def complete_state(st: RoundState, *, study: str, config_digest: str, modulus_bits: int,
                   degree: int, threshold: int, known_roster: str | None = None) -> RoundState:
    """A served state with what the coordinator left out put back: the study, the roster's
    payload and digest, and the signed requests' payloads. ``known_roster``: the digest the
    caller named in ``?known_roster=`` (the state then names no roster in phases that have
    one). Signatures are not checked here: the protocol functions check them as before."""
    ref = {"study_id": study, "round": st.round, "attempt": st.attempt}
    update: dict[str, object] = {"study_id": study}
    digest = st.roster_digest
    if st.roster is not None:
        members = json.loads(st.roster.payload).get("members", "")
        roster = complete(st.roster, **ref, config_digest=config_digest,
                          modulus_bits=modulus_bits, degree=degree, threshold=threshold,
                          size=popcount(members))
        update["roster"], digest = roster, roster.digest()
    elif digest is None and st.status in ROSTER_PHASES:
        digest = known_roster
    update["roster_digest"] = digest
    if st.request is not None and digest is not None and st.status in ROSTER_PHASES:
        lost = {"missing": sorted(st.inbox)} if st.request.kind == "recover" else {}
        update["request"] = complete(st.request, **ref, roster_digest=digest, **lost)
    return st.model_copy(update=update)
