"""Checks every kind of release runs before it is charged: the config it was drawn under is
the study's current one, and its cost fits the participant's cap; and the refusals of a
charge the ledger writer (:mod:`coordinator.ledger.charge`) turned away."""

from __future__ import annotations

import hmac
from typing import Protocol

from common.budget import PrivacyBudget
from common.errors import BudgetExceeded, ConfigVersionConflict, FedodError
from common.wire.schemas import ContributionCreate


class Holder(Protocol):
    """Whose budget is checked: a participant row, or the ingest route's caller."""

    @property
    def name(self) -> str:
        """Named in the refusal."""

    @property
    def spent(self) -> PrivacyBudget:
        """Charged so far (the ledger's sum)."""

    @property
    def cap(self) -> PrivacyBudget:
        """The most that may be charged."""


class ParticipantRevoked(FedodError):
    """The credential was revoked while the request was in flight."""

    status_code = 401


def check_config(study_id: str, version: int, digest: str, body: ContributionCreate) -> None:
    if body.config_version != version:
        raise ConfigVersionConflict(
            f"config version {body.config_version} is not the current version "
            f"{version} of study {study_id!r}; fetch the config again",
            current=version,
        )
    if not hmac.compare_digest(body.config_digest, digest):
        raise ConfigVersionConflict(
            f"config digest does not match version {version} of study "
            f"{study_id!r}; fetch the config again and verify its signature"
        )


def over_budget(participant: Holder, cost: PrivacyBudget) -> BudgetExceeded | None:
    """The refusal when ``cost`` does not fit (a sum past the exact range never fits)."""
    spent, cap = participant.spent, participant.cap
    try:
        fits = (spent + cost).fits_within(cap)
    except ValueError:  # spent + cost is past what the ledger can hold exactly
        fits = False
    if fits:
        return None
    return BudgetExceeded(spent=spent, asked=cost, cap=cap, participant=participant.name)
