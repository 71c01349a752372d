"""ORM tables of streaming mode (migrations 0008_online, 0009_online_schedule,
0011_online_centre): gradient and centring releases, and the online model."""

from __future__ import annotations

from datetime import datetime

import numpy as np
from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from common.online.params import OnlineParams
from common.online.wire import encode_vector
from coordinator.db.tables import Base, UTCDateTime, utcnow


class OnlineRelease(Base):
    """One participant's noisy mini-batch gradient sum (its charge is also a ledger entry).

    ``applied_in`` is the online model version whose step consumed it (null while pending);
    ``schedule_window`` the schedule window it closes (one release per participant, study and
    window; null for releases stored before the schedule); ``centring`` marks a release of
    the config's centring window: summed into the model's centre, never into a step.
    """

    __tablename__ = "online_releases"
    __table_args__ = (
        UniqueConstraint("participant_id", "study_id", "idempotency_key"),
        Index("ux_online_releases_window", "participant_id", "study_id", "schedule_window",
              unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id"), index=True)
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), index=True)
    idempotency_key: Mapped[str] = mapped_column(String(128))
    request_sha256: Mapped[str] = mapped_column(String(64))
    config_version: Mapped[int] = mapped_column(Integer)
    weights_version: Mapped[int] = mapped_column(Integer)
    schedule_window: Mapped[int | None] = mapped_column(Integer, nullable=True)
    count: Mapped[int] = mapped_column(Integer)
    noisy_sum: Mapped[str] = mapped_column(Text)
    eps_units: Mapped[int] = mapped_column(BigInteger)
    delta_units: Mapped[int] = mapped_column(BigInteger)
    applied_in: Mapped[int | None] = mapped_column(Integer, nullable=True)
    centring: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class OnlineModel(Base):
    """The current online classifier of a study: ``version`` steps taken; its row is the
    lock every gradient release takes. ``centre_sum`` is the sum of the ``centre_releases``
    centring releases' noisy sums (null: none yet); the centre served is its post-processing
    (:func:`coordinator.services.online_model.centre_of`)."""

    __tablename__ = "online_models"

    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, default=0)
    pending: Mapped[int] = mapped_column(Integer, default=0)
    weights: Mapped[str] = mapped_column(Text)
    average: Mapped[str] = mapped_column(Text)
    centre_sum: Mapped[str | None] = mapped_column(Text, nullable=True)
    centre_releases: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


def new_model(study_id: str, params: OnlineParams) -> OnlineModel:
    """The all-zero starting weights (version 0)."""
    zeros = encode_vector(np.zeros(params.dim))
    return OnlineModel(study_id=study_id, version=0, pending=0, weights=zeros, average=zeros,
                       centre_sum=None, centre_releases=0)
