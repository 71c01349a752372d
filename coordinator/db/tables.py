"""ORM tables. Privacy amounts are integer units (``PrivacyBudget.to_units``), never floats."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    DDL,
    BigInteger,
    Boolean,
    ColumnElement,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    event,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from common.budget import PrivacyBudget


def utcnow() -> datetime:
    """Timezone-aware current time in UTC."""
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that always comes back timezone-aware (SQLite drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_result_value(self, value, dialect):  # type: ignore[no-untyped-def]
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class Base(DeclarativeBase):
    """Declarative base of every coordinator table."""


class Participant(Base):
    """An enrolled organisation: credential hash, budget cap and what it has spent."""

    __tablename__ = "participants"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    eps_cap: Mapped[int] = mapped_column(BigInteger)
    delta_cap: Mapped[int] = mapped_column(BigInteger, default=0)
    eps_spent: Mapped[int] = mapped_column(BigInteger, default=0)
    delta_spent: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)

    @property
    def cap(self) -> PrivacyBudget:
        return PrivacyBudget.from_units(self.eps_cap, self.delta_cap)

    @property
    def spent(self) -> PrivacyBudget:
        return PrivacyBudget.from_units(self.eps_spent, self.delta_spent)


class Study(Base):
    """A study and its current signed config."""

    __tablename__ = "studies"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    config_version: Mapped[int] = mapped_column(Integer)
    config_payload: Mapped[str] = mapped_column(Text)
    config_signature: Mapped[str] = mapped_column(String(256))
    key_id: Mapped[str] = mapped_column(String(128))
    config_digest: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Aggregate(Base):
    """A study's model counter: version and contributors; its row is the lock ingest takes.

    Ingest only bumps these two integers; the sums live in :class:`AggregateSnapshot` and are
    folded from the stored contributions when the model is read, so a contribution never
    rewrites the whole model.
    """

    __tablename__ = "aggregates"

    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, default=0)
    contributors: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class AggregateSnapshot(Base):
    """The merged sums of a study as of model ``version`` (contributions folded so far)."""

    __tablename__ = "aggregate_snapshots"

    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, default=0)
    contributors: Mapped[int] = mapped_column(Integer, default=0)
    lsh_sum: Mapped[bytes] = mapped_column(LargeBinary, default=b"")
    grid_indices: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    grid_values: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)


class Member(Base):
    """A participant allowed to read and contribute to a study."""

    __tablename__ = "members"

    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id"), primary_key=True)
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Contribution(Base):
    """One accepted release, stored as it arrived (encoded counts); the model is folded from these.

    ``model_version`` is the study's model version this release created (the fold order);
    ``replaces_id`` the same participant's previous release for the study, which this one
    supersedes in the model (a participant's data counts once; the ledger charges both).
    A row that only itemises a charge (a secure, online or cohort release) is kept out of
    the model by one rule, :data:`OUTSIDE_MODEL` (see :func:`in_model`).
    """

    __tablename__ = "contributions"
    __table_args__ = (
        UniqueConstraint(
            "participant_id", "study_id", "idempotency_key", name="uq_contributions_key"
        ),
        # for ledger.charge.LATEST (max id of a participant's model releases to the study): with
        # (participant_id, study_id, id) SQLite planned it over ix_contributions_study_version
        # instead, a scan of every release of the study (migration 0010)
        Index("ix_contributions_latest", "participant_id", "study_id", "model_version"),
        Index("ix_contributions_study_version", "study_id", "model_version"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id"))
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id"))
    replaces_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    idempotency_key: Mapped[str] = mapped_column(String(128))
    request_sha256: Mapped[str] = mapped_column(String(64))
    config_version: Mapped[int] = mapped_column(Integer)
    eps_units: Mapped[int] = mapped_column(BigInteger)
    delta_units: Mapped[int] = mapped_column(BigInteger)
    lsh_payload: Mapped[str] = mapped_column(Text)
    grid_payload: Mapped[str | None] = mapped_column(Text, nullable=True)
    model_version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


OUTSIDE_MODEL = 0
"""The ``model_version`` of a contribution row that is not an LSH release (a secure round's
masked vector, an online gradient, a cohort release: the ledger writer,
``coordinator.ledger.charge``, itemises their charges as such rows).

The one rule that keeps a row out of the LSH model: the fold takes the rows of the model
versions past its snapshot's (``> snapshot.version >= OUTSIDE_MODEL``, ``services.aggregate``)
and a release replaces its participant's latest row with ``model_version > OUTSIDE_MODEL``
(``LATEST``), so such a row is never merged, never replaces and is never replaced. Secure
rows stored before this rule carry the study's model version at their charge instead; no
fold window holds them either (a secure study's snapshot moves with its counter, and it
takes no LSH releases that could replace them)."""


def in_model(after: int, upto: int) -> ColumnElement[bool]:
    """The LSH releases of model versions ``after`` (exclusive) to ``upto``: never a row at
    :data:`OUTSIDE_MODEL`, since a snapshot version is never below it."""
    assert after >= OUTSIDE_MODEL
    return (Contribution.model_version > after) & (Contribution.model_version <= upto)


def lsh_releases() -> ColumnElement[bool]:
    """Every LSH release (the rows a later release of the same participant may replace)."""
    return Contribution.model_version > OUTSIDE_MODEL


EXTERNAL_STORAGE = {
    "contributions": ("lsh_payload", "grid_payload"),
    "aggregate_snapshots": ("lsh_sum", "grid_indices", "grid_values"),
}
"""Columns PostgreSQL stores out of line *uncompressed*: they hold compressed or noisy bytes
that its TOAST compression only burns CPU on (about 0.5 us per cell on every write)."""


def _external_storage(table: str) -> DDL:
    columns = ", ".join(f"ALTER COLUMN {c} SET STORAGE EXTERNAL" for c in EXTERNAL_STORAGE[table])
    ddl = DDL(f"ALTER TABLE {table} {columns}")  # type: ignore[no-untyped-call]
    return ddl.execute_if(dialect="postgresql")


for _model in (Contribution, AggregateSnapshot):
    event.listen(_model.__table__, "after_create", _external_storage(_model.__tablename__))


class LedgerEntry(Base):
    """One itemised charge; rows are only ever inserted (no update or delete path exists)."""

    __tablename__ = "ledger_entries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), index=True)
    contribution_id: Mapped[int] = mapped_column(ForeignKey("contributions.id"), index=True)
    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id"))
    kind: Mapped[str] = mapped_column(String(8))
    eps_units: Mapped[int] = mapped_column(BigInteger)
    delta_units: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class RefusedAttempt(Base):
    """A release the coordinator refused because it would pass the participant's cap.

    Nothing of the release is kept (its bytes were refused); the row records who tried,
    for which study and at what claimed cost, so the dashboard can show it.
    """

    __tablename__ = "refused_attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), index=True)
    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id"))
    eps_units: Mapped[int] = mapped_column(BigInteger)
    delta_units: Mapped[int] = mapped_column(BigInteger)
    reason: Mapped[str] = mapped_column(String(256))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
