"""ORM tables of secure aggregation rounds (migrations 0004_secagg, 0012_membership,
0013_beacon)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from coordinator.db.tables import Base, UTCDateTime, utcnow


class IdentityKey(Base):
    """A participant's long-term Ed25519 identity key (raw, base64); set once."""

    __tablename__ = "identity_keys"

    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), primary_key=True)
    public_key: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Round(Base):
    """One attempt of a release round; its row is the lock every round message takes."""

    __tablename__ = "secagg_rounds"
    __table_args__ = (UniqueConstraint("study_id", "number", "attempt"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    expected: Mapped[str] = mapped_column(Text)  # JSON list of participant names
    roster: Mapped[str | None] = mapped_column(Text, nullable=True)  # SignedMessage JSON
    request: Mapped[str | None] = mapped_column(Text, nullable=True)
    beacon: Mapped[str | None] = mapped_column(String(88), nullable=True)  # common.secagg.beacon
    draws: Mapped[str | None] = mapped_column(Text, nullable=True)  # common.secagg.draws JSON
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class RoundMessage(Base):
    """A participant's signed message of one attempt (advert, masked, unmask), as received."""

    __tablename__ = "secagg_messages"

    round_id: Mapped[int] = mapped_column(ForeignKey("secagg_rounds.id"), primary_key=True)
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), primary_key=True)
    kind: Mapped[str] = mapped_column(String(8), primary_key=True)
    payload: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class StudyMembership(Base):
    """The consortium-signed membership certificate of a study (migration 0012_membership).

    Stored and served as uploaded: the coordinator cannot sign one (it does not hold the
    consortium key), and members verify it under the key they pinned at enrolment."""

    __tablename__ = "study_memberships"

    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    signed: Mapped[str] = mapped_column(Text)  # SignedMembership JSON
    uploaded_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
