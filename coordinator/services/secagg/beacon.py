"""The beacon phase of a secure round (studies whose masking graph needs one only).

    keys ──(roster signed)──► beacon ──(the consortium's beacon signature)──► masking

The consortium key holder (``fedod-consortium beacon``) reads the attempt waiting here with its
full signed roster (:func:`pending`) and posts its Ed25519 signature over it
(:func:`accept_beacon`, :mod:`common.secagg.beacon`). The coordinator does not hold the
consortium key and has no copy of its public half beside the membership certificate; the post
names the key, which must verify the study's stored certificate (so it is the key members
pinned, or the round could not run anyway), and the signature must verify under it, as must
the draw count statements it posts with it, exactly one per roster member
(:mod:`common.secagg.draws`); each member is served only its own (:func:`member_draw`).
Members verify both again under their own pinned key before they read any data.
"""

from __future__ import annotations

import json

from cryptography.exceptions import InvalidSignature
from sqlalchemy.orm import Session

from common.errors import Conflict, NotFound, SignatureInvalid
from common.secagg.beacon import verify_beacon
from common.secagg.draws import verify_draw
from common.secagg.membership import CONTEXT, SignedMembership
from common.secagg.messages import RosterBody, RoundRefused, SignedMessage, b64d, raw_ed25519
from common.secagg.roster import from_bitmap
from common.secagg.schemas import BeaconCreate, BeaconDraw, BeaconPending, RoundStatus
from coordinator.db.secagg import Round
from coordinator.db.tables import Study
from coordinator.services.secagg import store
from coordinator.services.secagg.phases import ref
from coordinator.services.secagg.rounds import current
from coordinator.services.studies import study_config

__all__ = ["pending", "accept_beacon", "member_draw"]


def _waiting(study_id: str) -> NotFound:
    """One answer for an unknown study and for one with no attempt waiting (these routes take
    no credential: they must not tell who asks which study ids exist)."""
    return NotFound(f"no attempt of {study_id!r} waits for a beacon signature")


def _beacon_study(session: Session, study_id: str) -> Study:
    study = session.get(Study, study_id)
    if study is None:
        raise _waiting(study_id)
    config = study_config(study)
    if config.aggregation is None or not config.aggregation.needs_beacon:
        raise _waiting(study_id)
    return study


def pending(session: Session, study_id: str) -> BeaconPending:
    """The current attempt of a beacon study if it waits for the beacon; 404 otherwise."""
    study = _beacon_study(session, study_id)
    try:
        rnd = current(session, study.id)
    except NotFound:
        raise _waiting(study_id) from None
    if rnd.status != RoundStatus.BEACON or rnd.roster is None:
        raise _waiting(study_id)
    return BeaconPending(study_id=study.id, round=rnd.number, attempt=rnd.attempt,
                         roster=SignedMessage.model_validate_json(rnd.roster))


def _consortium_key(session: Session, study_id: str, text: str) -> SignedMembership:
    """The study's stored membership certificate; refuse a key that did not sign it."""
    signed = store.membership(session, study_id)
    if signed is None:
        raise Conflict(f"study {study_id!r} has no membership certificate")
    try:
        raw_ed25519(text).verify(b64d(signed.signature),
                                 CONTEXT + signed.payload.encode("utf-8"))
    except (InvalidSignature, ValueError) as exc:
        raise SignatureInvalid(
            "consortium_key did not sign this study's membership certificate: post the "
            "beacon with the consortium key that certified the members") from exc
    return signed


def _draws(rnd: Round, roster: SignedMessage, membership: SignedMembership,
           body: BeaconCreate) -> str:
    """The draw statements, one per roster member exactly, each verified under the
    consortium key (common.secagg.draws), as stored: JSON {name: [count, signature]}."""
    names = from_bitmap(list(membership.body().members),
                        RosterBody.model_validate_json(roster.payload))
    if set(body.draws) != set(names):
        raise SignatureInvalid(
            f"the beacon posted draw counts for {len(body.draws)} members, not for exactly "
            f"the {len(names)} roster members")
    key = raw_ed25519(body.consortium_key)
    for name in names:
        draw = body.draws[name]
        try:
            verify_draw(ref(rnd), body.roster_digest, name, draw.count, draw.signature, key)
        except RoundRefused as exc:
            raise SignatureInvalid(exc.message) from exc
    return json.dumps({n: [body.draws[n].count, body.draws[n].signature] for n in names},
                      separators=(",", ":"))


def accept_beacon(session: Session, study_id: str, number: int, body: BeaconCreate) -> Round:
    """Store the beacon signature of the waiting attempt and open masking; the same signature
    again is a no-op (a retry). 404, one answer, for everything an anonymous caller may not
    know (no such study, no beacon study, another round or attempt, out of phase, another
    roster); 422 a key or signature that does not verify for the waiting attempt."""
    study = _beacon_study(session, study_id)
    try:
        rnd = current(session, study.id, lock=True)
    except NotFound:
        raise _waiting(study_id) from None
    same = (rnd.number, rnd.attempt) == (number, body.attempt)
    if same and rnd.beacon is not None and rnd.beacon == body.signature:
        return rnd
    roster = SignedMessage.model_validate_json(rnd.roster) if rnd.roster else None
    if (not same or rnd.status != RoundStatus.BEACON or roster is None
            or body.roster_digest != roster.digest()):
        raise _waiting(study_id)  # no round counter, phase or roster for an anonymous caller
    digest = roster.digest()
    membership = _consortium_key(session, study.id, body.consortium_key)
    try:
        verify_beacon(body.signature, ref(rnd), digest, raw_ed25519(body.consortium_key))
    except RoundRefused as exc:
        raise SignatureInvalid(exc.message) from exc
    rnd.draws = _draws(rnd, roster, membership, body)
    rnd.beacon, rnd.status = body.signature, RoundStatus.MASKING
    session.commit()
    return rnd


def member_draw(rnd: Round, name: str) -> BeaconDraw | None:
    """``name``'s own draw statement of ``rnd`` (beacon studies, once the beacon signed)."""
    if rnd.draws is None:
        return None
    mine = json.loads(rnd.draws).get(name)
    return None if mine is None else BeaconDraw(count=mine[0], signature=mine[1])
