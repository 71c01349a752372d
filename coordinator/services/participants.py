"""Participants: enrolment with a one-time credential, revocation, budget caps."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from common.budget import PrivacyBudget
from common.errors import Conflict, NotFound
from coordinator.db.tables import Participant, utcnow


def hash_token(token: str) -> str:
    """Hex SHA-256 of a credential; only this is stored."""
    return hashlib.sha256(token.encode()).hexdigest()


def authenticate(session: Session, token: str) -> Participant | None:
    """The participant holding ``token`` (active or not), or None."""
    digest = hash_token(token)
    participant = session.scalar(select(Participant).where(Participant.token_hash == digest))
    if participant is None or not hmac.compare_digest(participant.token_hash, digest):
        return None
    return participant


def get_participant(session: Session, name: str, *, for_update: bool = False) -> Participant:
    """The named participant, optionally row-locked; NotFound otherwise."""
    query = select(Participant).where(Participant.name == name)
    if for_update:
        query = query.with_for_update()
    participant = session.scalar(query.execution_options(populate_existing=True))
    if participant is None:
        raise NotFound(f"no participant named {name!r}", participant=name)
    return participant


def list_participants(session: Session) -> list[Participant]:
    return list(session.scalars(select(Participant).order_by(Participant.name)))


def new_token() -> str:
    """A random credential (32 bytes, URL-safe base64) that does not start with ``-``: the
    participant passes it on a command line, where ``--token -x...`` reads as an option
    (one token in 64 did). Rejection keeps it uniform over the rest (about 255.98 bits)."""
    while (token := secrets.token_urlsafe(32)).startswith("-"):
        pass
    return token


def create_participant(session: Session, name: str, cap: PrivacyBudget) -> tuple[Participant, str]:
    """Enrol ``name`` with a budget cap; return it and its credential (shown once)."""
    if session.scalar(select(Participant.id).where(Participant.name == name)) is not None:
        raise Conflict(f"a participant named {name!r} already exists; pick another name")
    token = new_token()
    eps, delta = cap.to_units()
    participant = Participant(
        name=name,
        token_hash=hash_token(token),
        active=True,
        eps_cap=eps,
        delta_cap=delta,
        eps_spent=0,
        delta_spent=0,
    )
    session.add(participant)
    try:
        session.commit()
    except IntegrityError as exc:  # a concurrent request enrolled the same name first
        session.rollback()
        raise Conflict(f"a participant named {name!r} already exists; pick another name") from exc
    return participant, token


def revoke_participant(session: Session, name: str) -> Participant:
    """Deactivate a credential; takes effect on the next request."""
    participant = get_participant(session, name, for_update=True)
    if participant.active:
        participant.active = False
        participant.revoked_at = utcnow()
    session.commit()
    return participant


def set_cap(
    session: Session, name: str, *, epsilon: Decimal | None = None, delta: Decimal | None = None
) -> Participant:
    """Change a cap; refused (409) when it would fall below what is already spent."""
    participant = get_participant(session, name, for_update=True)
    eps_cap = PrivacyBudget(epsilon).to_units()[0] if epsilon is not None else participant.eps_cap
    delta_cap = (
        PrivacyBudget(0, delta).to_units()[1] if delta is not None else participant.delta_cap
    )
    if eps_cap < participant.eps_spent or delta_cap < participant.delta_spent:
        asked = PrivacyBudget.from_units(eps_cap, delta_cap)
        session.rollback()
        raise Conflict(
            f"cannot set the cap of {name!r} to {asked}: it has already spent "
            f"{participant.spent}, and spending is never undone",
            participant=name,
        )
    participant.eps_cap, participant.delta_cap = eps_cap, delta_cap
    session.commit()
    return participant
