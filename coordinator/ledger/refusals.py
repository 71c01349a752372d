"""Refused attempts: releases turned away because they would pass a participant's cap."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from common.budget import PrivacyBudget
from common.errors import BudgetExceeded
from coordinator.db.tables import Participant, RefusedAttempt


def record_refusal(
    session: Session, participant_id: int, study_id: str, asked: PrivacyBudget,
    error: BudgetExceeded,
) -> None:
    """Store one refused attempt in its own transaction (the release's was rolled back)."""
    session.rollback()
    eps, delta = asked.to_units()
    session.add(RefusedAttempt(participant_id=participant_id, study_id=study_id,
                               eps_units=eps, delta_units=delta, reason=error.message[:256]))
    session.commit()


def refused_attempts(
    session: Session, *, participant_id: int | None = None, study_id: str | None = None,
    limit: int = 50,
) -> list[tuple[RefusedAttempt, str]]:
    """The latest refused attempts with the participant's name, newest first."""
    query = (select(RefusedAttempt, Participant.name)
             .join(Participant, Participant.id == RefusedAttempt.participant_id)
             .order_by(RefusedAttempt.id.desc()).limit(limit))
    if participant_id is not None:
        query = query.where(RefusedAttempt.participant_id == participant_id)
    if study_id is not None:
        query = query.where(RefusedAttempt.study_id == study_id)
    return [(row, name) for row, name in session.execute(query)]
