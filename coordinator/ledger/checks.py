"""Checks every kind of release runs before it is charged: the config it was drawn under is
the study's current one, and its cost fits the participant's cap."""

from __future__ import annotations

import hmac

from common.budget import PrivacyBudget
from common.errors import BudgetExceeded, ConfigVersionConflict
from common.schemas import ContributionCreate
from coordinator.db.tables import Participant
from coordinator.services.ingest_lookup import IngestCaller


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


def over_budget(
    participant: Participant | IngestCaller, cost: PrivacyBudget
) -> BudgetExceeded | None:
    """The refusal when ``cost`` does not fit (a sum past the exact range never fits)."""
    spent, cap = participant.spent, participant.cap
    try:
        fits = (spent + cost).fits_within(cap)
    except ValueError:  # spent + cost is past what the ledger can hold exactly
        fits = False
    if fits:
        return None
    return BudgetExceeded(spent=spent, asked=cost, cap=cap, participant=participant.name)
