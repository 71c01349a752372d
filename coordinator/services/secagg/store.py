"""Storage helpers of secure aggregation rounds: identity keys, round rows, messages, charging.

The ledger charge of a secure release happens in the transaction that accepts the
participant's masked vector, once per (participant, study, round): a restarted attempt re-sends
the same noisy vector under fresh masks and is not charged again.
"""

from __future__ import annotations

import json

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from numpy.typing import NDArray
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from common.budget import PrivacyBudget
from common.errors import Conflict
from common.secagg.identity import verify_identity_proof
from common.secagg.membership import MembershipBody, SignedMembership
from common.secagg.messages import RecoverBody, SignedMessage, b64d, b64e
from common.secagg.params import AggregationParams
from common.secagg.schemas import IdentityKeyCreate
from common.secagg.vector import split_secure_sum
from common.secagg.wire import frame_digest
from common.study.config import StudyConfig
from coordinator.db.secagg import IdentityKey, Round, RoundMessage, StudyMembership
from coordinator.db.tables import Aggregate, AggregateSnapshot, Participant, utcnow
from coordinator.ledger import charge
from coordinator.ledger.checks import ParticipantRevoked, over_budget
from coordinator.ledger.releases import Item, previous


def register_identity(session: Session, participant: Participant, body: IdentityKeyCreate,
                      coordinator_key_id: str) -> bool:
    """Store the participant's identity key once; True if new.

    The proof of possession is checked first (422), so a key registered to another
    participant (409) is only ever reported to the key's holder; another key for the same
    participant is 409 too; the same key again is a no-op.
    """
    public_key = body.public_key
    verify_identity_proof(public_key, body.proof, coordinator_key_id, participant.name)
    existing = session.get(IdentityKey, participant.id)
    if existing is not None:
        if existing.public_key != public_key:
            raise Conflict(
                f"participant {participant.name!r} already registered another identity key; "
                "identity keys are long-term (ask the admin to enrol a new participant)"
            )
        return False
    taken = Conflict("this identity key is already registered to another participant; "
                     "each participant needs an identity key of its own")
    if session.scalar(select(IdentityKey.participant_id)
                      .where(IdentityKey.public_key == public_key)) is not None:
        raise taken
    session.add(IdentityKey(participant_id=participant.id, public_key=public_key))
    try:
        session.commit()
    except IntegrityError as exc:  # a concurrent registration of the same key or participant
        session.rollback()
        raise taken from exc
    return True


def identity_of(session: Session, participant: Participant) -> Ed25519PublicKey:
    key = session.get(IdentityKey, participant.id)
    if key is None:
        raise Conflict(
            f"participant {participant.name!r} has no identity key; register one first "
            "(POST /v1/me/identity-key)"
        )
    return Ed25519PublicKey.from_public_bytes(b64d(key.public_key, size=32))


def membership(session: Session, study_id: str) -> SignedMembership | None:
    """The study's stored membership certificate (as uploaded), or None."""
    row = session.get(StudyMembership, study_id)
    return None if row is None else SignedMembership.model_validate_json(row.signed)


def save_membership(
    session: Session, study_id: str, params: AggregationParams, signed: SignedMembership
) -> MembershipBody:
    """Store a membership certificate for the study (its signature is the members' to check:
    the coordinator does not hold the consortium key). Refused (409) for another study, other
    cohort parameters than the config's, another member count than n, or an older version."""
    body = signed.body()
    if body.study_id != study_id:
        raise Conflict(f"membership certificate is for study {body.study_id!r}, not {study_id!r}")
    certified = (body.cohort_size, body.max_dropouts, body.max_colluders)
    config = (params.cohort_size, params.max_dropouts, params.max_colluders)
    if certified != config or len(body.members) != body.cohort_size:
        raise Conflict(
            f"membership certifies (n, D, T) = {certified} with {len(body.members)} members; "
            f"the study config has {config}: members would refuse it"
        )
    row = session.get(StudyMembership, study_id)
    if row is not None and body.version < row.version:
        raise Conflict(
            f"membership v{body.version} is older than the stored v{row.version}: refused"
        )
    if row is None:
        session.add(StudyMembership(study_id=study_id, version=body.version,
                                    signed=signed.model_dump_json()))
    else:
        row.version, row.signed, row.uploaded_at = body.version, signed.model_dump_json(), utcnow()
    session.commit()
    return body


def certified_cohort(session: Session, study_id: str, participant_ids: list[int]) -> list[str]:
    """Exactly the certified members (by name) that are active study members with their
    certified identity key registered; 409 without a certificate, or when a member registered
    another key than the certified one."""
    signed = membership(session, study_id)
    if signed is None:
        raise Conflict(
            f"study {study_id!r} has no membership certificate: the consortium's "
            "data-protection officer signs one ('fedod-consortium sign') and the admin uploads "
            f"it (PUT /v1/studies/{study_id}/membership) before a round opens"
        )
    certified = signed.body().members
    rows = session.execute(
        select(Participant.name, IdentityKey.public_key)
        .join(IdentityKey, IdentityKey.participant_id == Participant.id)
        .where(Participant.id.in_(participant_ids), Participant.active.is_(True))
    )
    names = []
    for name, key in rows:
        if name not in certified:
            continue
        if certified[name] != key:
            raise Conflict(
                f"{name!r} registered another identity key than the consortium certified; "
                "members would refuse the roster (ask the data-protection officer)"
            )
        names.append(name)
    return sorted(names)


def expected(rnd: Round) -> list[str]:
    names: list[str] = json.loads(rnd.expected)
    return names


def messages(session: Session, rnd: Round, kind: str, names: list[str] | None = None
             ) -> dict[str, str]:
    """Name -> the stored message: base64 of a frame (advert, masked, unmask) or the JSON of a
    signed message (shares); only those of ``names`` when given."""
    query = (
        select(Participant.name, RoundMessage.payload)
        .join(Participant, Participant.id == RoundMessage.participant_id)
        .where(RoundMessage.round_id == rnd.id, RoundMessage.kind == kind)
    )
    if names is not None:
        query = query.where(Participant.name.in_(names))
    return {name: p for name, p in session.execute(query)}


def kinds_of(session: Session, rnd: Round, participant: Participant) -> set[str]:
    """The kinds of message ``participant`` has sent in this attempt."""
    return set(session.scalars(select(RoundMessage.kind).where(
        RoundMessage.round_id == rnd.id, RoundMessage.participant_id == participant.id)))


def counts(session: Session, rnd: Round) -> dict[str, int]:
    rows = session.execute(
        select(RoundMessage.kind, func.count())
        .where(RoundMessage.round_id == rnd.id)
        .group_by(RoundMessage.kind)
    )
    out = {"advert": 0, "masked": 0, "unmask": 0, "shares": 0}
    for kind, count in rows:
        out[kind] = count
    return out


def stored_message(
    session: Session, rnd: Round, participant: Participant, kind: str, payload: str
) -> bool:
    """True if this exact message is already stored (a retry); 409 if a different one is."""
    row = session.get(RoundMessage, (rnd.id, participant.id, kind))
    if row is None:
        return False
    if row.payload != payload:
        raise Conflict(
            f"{participant.name!r} already sent a different {kind} message in round "
            f"{rnd.number} attempt {rnd.attempt}"
        )
    return True


def store_message(
    session: Session, rnd: Round, participant: Participant, kind: str, payload: str
) -> None:
    session.add(
        RoundMessage(
            round_id=rnd.id,
            participant_id=participant.id,
            kind=kind,
            payload=payload,
        )
    )


def charge_release(session: Session, participant: Participant, rnd: Round, config_version: int,
                   cost: PrivacyBudget, frame: bytes) -> None:
    """Charge one release per (participant, study, round) through the ledger writer, within
    the caller's transaction: a restarted attempt re-sends the same noisy vector under fresh
    masks and is not charged again."""
    key = f"secagg:{rnd.study_id}:{rnd.number}"
    conn = session.connection()
    if previous(conn, participant.id, rnd.study_id, key)[0]:
        return
    item = Item(participant.id, rnd.study_id, key, frame_digest(frame), config_version, cost,
                b64e(frame), "secagg")
    if charge.charge_item(conn, item) is None:
        fresh = session.get(Participant, participant.id, populate_existing=True)
        assert fresh is not None
        raise over_budget(fresh, cost) or ParticipantRevoked(
            f"participant {fresh.name!r} was revoked")


def participant_by_name(session: Session, name: str) -> Participant:
    found = session.scalar(select(Participant).where(Participant.name == name))
    assert found is not None
    return found


def identity_by_name(session: Session, name: str) -> Ed25519PublicKey:
    return identity_of(session, participant_by_name(session, name))


def missing_members(rnd: Round, names: list[str]) -> list[str]:
    """The members a recover request names (recover phase)."""
    assert rnd.request is not None
    payload = SignedMessage.model_validate_json(rnd.request).payload
    return [n for n in RecoverBody.model_validate_json(payload).missing if n in names]


def replace_model(
    session: Session, study_id: str, config: StudyConfig, total: NDArray[np.int64], members: int
) -> None:
    """The revealed sum replaces the study's model (a secure study takes no /contributions to
    fold); the version moves on and ``contributors`` is the roster size."""
    aggregate = session.scalar(
        select(Aggregate)
        .where(Aggregate.study_id == study_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    snapshot = session.scalar(
        select(AggregateSnapshot).where(AggregateSnapshot.study_id == study_id).with_for_update()
    )
    assert aggregate is not None and snapshot is not None
    aggregate.version += 1
    aggregate.contributors = members
    lsh, grid = split_secure_sum(config, total)
    snapshot.lsh_sum = lsh.astype("<i8").tobytes()
    if grid is not None:
        snapshot.grid_indices, snapshot.grid_values = None, grid.astype("<i8").tobytes()
    snapshot.version, snapshot.contributors = aggregate.version, aggregate.contributors
    aggregate.updated_at = utcnow()
