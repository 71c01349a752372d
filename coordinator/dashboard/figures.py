"""The dashboard's figures that must be true for every study kind and read honestly.

- :func:`study_kind` and :func:`cost_items`: what a study's releases cost, per kind: an LSH
  release (independent noise or a secure round), a stream's schedule window (its selection
  plus gradient charge, with delta), the cohort rounds' separate epsilon over their rounds.
- :func:`contributors_text`: a model's contributors, noting those since revoked.
- :func:`spread`: per-participant epsilon summarised by its largest and median value; epsilon
  of different participants is never summed (each bounds what its own records can leak).
"""

from __future__ import annotations

from decimal import Decimal
from html import escape
from statistics import median

from sqlalchemy import distinct, func, select
from sqlalchemy.orm import Session

from common.budget import PrivacyBudget
from common.budget import plain_decimal as fmt
from common.study.config import StudyConfig
from coordinator.db.tables import LedgerEntry, Participant

NOT_MODEL_KINDS = ("online", "cohort")
"""Ledger kinds that are not releases into a study's LSH model (a stream window, a cohort
round); every other charge (an LSH release, a secure round) contributes to the model."""


def study_kind(config: StudyConfig) -> str:
    """``independent`` or ``secure``, then ``+ stream`` / ``+ cohorts`` where present."""
    parts: list[str] = [config.aggregation_mode]
    if config.online is not None:
        parts.append("stream")
    if config.cohorts is not None:
        parts.append("cohorts")
    return " + ".join(parts)


def _cost(budget: PrivacyBudget) -> str:
    text = f"ε {fmt(budget.epsilon)}"
    return text + (f", δ {fmt(budget.delta)}" if budget.delta else "")


def cost_items(config: StudyConfig) -> list[tuple[str, str]]:
    """``(field, text)`` per thing a participant pays for in this study, each at its own
    price: never one number for all (a stream window and a cohort run cost differently)."""
    mode = "secure round" if config.aggregation_mode == "secure" else "release"
    items = [("release", f"{_cost(config.release_cost())} per {mode}")]
    if config.online is not None:
        items.append(("window", f"{_cost(config.online.epoch_cost())} per stream window"))
    if config.cohorts is not None:
        from common.cohorts.study import protocol_of

        rounds = protocol_of(config).rounds
        items.append(("cohorts", f"{_cost(config.cohorts.cap())} in all over at most {rounds} "
                                 "cohort rounds, on top of the releases"))
    return items


def cost_html(config: StudyConfig) -> str:
    """:func:`cost_items` as lines of a table cell, each with its ``data-cost`` field."""
    return "<br>".join(f'<span data-cost="{field}">{escape(text)}</span>'
                       for field, text in cost_items(config))


def revoked_contributors(session: Session, study_id: str) -> int:
    """How many participants whose releases are in the study's model are now revoked."""
    query = (select(func.count(distinct(LedgerEntry.participant_id)))
             .join(Participant, Participant.id == LedgerEntry.participant_id)
             .where(LedgerEntry.study_id == study_id, LedgerEntry.kind.not_in(NOT_MODEL_KINDS),
                    Participant.active.is_(False)))
    return int(session.scalar(query) or 0)


def contributors_text(contributors: int, revoked: int) -> str:
    """``"3 contributing participants, 1 since revoked (its releases stay in the model)"``."""
    revoked = min(revoked, contributors)
    text = f"{contributors} contributing participant{'' if contributors == 1 else 's'}"
    if revoked:
        text += (f", {revoked} since revoked (releases made before a revocation stay in the "
                 "model)")
    return text


def spread(values: list[Decimal]) -> tuple[Decimal, Decimal]:
    """Largest and median of per-participant figures (0, 0 when there are none)."""
    if not values:
        return Decimal(0), Decimal(0)
    return max(values), Decimal(median(values))
