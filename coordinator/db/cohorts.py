"""ORM tables of private cohort rounds (migration 0007_cohorts)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from coordinator.db.tables import Base, UTCDateTime, utcnow


class CohortRound(Base):
    """One round of a study's cohort run; the open round's row is the lock its releases take.

    ``state`` is the public :class:`~common.cohorts.protocol.CohortState` the round starts from,
    ``expected`` the JSON list of participant names the round waits for.
    """

    __tablename__ = "cohort_rounds"

    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id"), primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    config_version: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(Text)
    expected: Mapped[str] = mapped_column(Text)
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class CohortRelease(Base):
    """A participant's noisy vector of one round, as received (a retry must match it)."""

    __tablename__ = "cohort_releases"

    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id"), primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), primary_key=True)
    idempotency_key: Mapped[str] = mapped_column(String(128))
    payload_sha256: Mapped[str] = mapped_column(String(64))
    payload: Mapped[str] = mapped_column(Text)
    contribution_id: Mapped[int] = mapped_column(ForeignKey("contributions.id"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class CohortResult(Base):
    """The released :class:`~common.cohorts.model.CohortModel` of a finished run (JSON)."""

    __tablename__ = "cohort_results"

    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id"), primary_key=True)
    method: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
