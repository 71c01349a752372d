"""The epsilon ledger as the admin and participants see it (read-only views)."""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import select
from sqlalchemy.orm import Session

from common.budget import PrivacyBudget
from common.wire.schemas import BudgetPublic, LedgerEntryPublic
from coordinator.db.tables import LedgerEntry, Participant


def entry_public(entry: LedgerEntry) -> LedgerEntryPublic:
    cost = PrivacyBudget.from_units(entry.eps_units, entry.delta_units)
    return LedgerEntryPublic(
        contribution_id=entry.contribution_id,
        study_id=entry.study_id,
        kind=entry.kind,
        epsilon=cost.epsilon,
        delta=cost.delta,
        created_at=entry.created_at,
    )


def budget_public(participant: Participant, entries: list[LedgerEntry]) -> BudgetPublic:
    """Cap, spent, remaining and the itemised charges of one participant."""
    cap, spent = participant.cap, participant.spent
    remaining = cap.remaining(spent)
    return BudgetPublic(
        participant=participant.name,
        active=participant.active,
        epsilon_cap=cap.epsilon,
        delta_cap=cap.delta,
        epsilon_spent=spent.epsilon,
        delta_spent=spent.delta,
        epsilon_remaining=remaining.epsilon,
        delta_remaining=remaining.delta,
        entries=[entry_public(e) for e in entries],
    )


def budget_of(session: Session, participant: Participant) -> BudgetPublic:
    entries = session.scalars(
        select(LedgerEntry)
        .where(LedgerEntry.participant_id == participant.id)
        .order_by(LedgerEntry.id)
    )
    return budget_public(participant, list(entries))


def all_budgets(session: Session) -> list[BudgetPublic]:
    """Every participant's budget, by name."""
    by_participant: dict[int, list[LedgerEntry]] = defaultdict(list)
    for entry in session.scalars(select(LedgerEntry).order_by(LedgerEntry.id)):
        by_participant[entry.participant_id].append(entry)
    participants = session.scalars(select(Participant).order_by(Participant.name))
    return [budget_public(p, by_participant[p.id]) for p in participants]


def recent_charges(session: Session, limit: int = 20) -> list[tuple[LedgerEntry, str]]:
    """The latest ledger entries with the participant's name, newest first."""
    rows = session.execute(
        select(LedgerEntry, Participant.name)
        .join(Participant, Participant.id == LedgerEntry.participant_id)
        .order_by(LedgerEntry.id.desc())
        .limit(limit)
    )
    return [(entry, name) for entry, name in rows]
