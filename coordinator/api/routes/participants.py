"""Participants (admin): enrol, list, revoke, change caps; and ``/me`` for a participant."""

from __future__ import annotations

from fastapi import APIRouter, status

from common.budget import PrivacyBudget
from common.wire.schemas import (
    BudgetPublic,
    ParticipantCreate,
    ParticipantCreated,
    ParticipantPublic,
    ParticipantUpdate,
)
from coordinator.api.auth_route import AuthFirstRoute
from coordinator.api.deps import AdminDep, CurrentParticipant, ReadSessionDep, SessionDep
from coordinator.db.tables import Participant
from coordinator.ledger.views import budget_of
from coordinator.services import participants

router = APIRouter(tags=["participants"], route_class=AuthFirstRoute)


def participant_public(participant: Participant) -> ParticipantPublic:
    cap = participant.cap
    return ParticipantPublic(
        name=participant.name,
        active=participant.active,
        epsilon_cap=cap.epsilon,
        delta_cap=cap.delta,
        created_at=participant.created_at,
    )


@router.post("/participants", status_code=status.HTTP_201_CREATED)
def create_participant(
    body: ParticipantCreate, session: SessionDep, _: AdminDep
) -> ParticipantCreated:
    """Enrol a participant; its credential is in this response only."""
    cap = PrivacyBudget(body.epsilon_cap, body.delta_cap)
    participant, token = participants.create_participant(session, body.name, cap)
    return ParticipantCreated(name=participant.name, token=token)


@router.get("/participants")
def list_participants(session: ReadSessionDep, _: AdminDep) -> list[ParticipantPublic]:
    """Every participant (no credentials)."""
    return [participant_public(p) for p in participants.list_participants(session)]


@router.post("/participants/{name}/revoke")
def revoke_participant(name: str, session: SessionDep, _: AdminDep) -> ParticipantPublic:
    """Revoke a credential; effective on the next request."""
    return participant_public(participants.revoke_participant(session, name))


@router.patch("/participants/{name}")
def update_caps(
    name: str, body: ParticipantUpdate, session: SessionDep, _: AdminDep
) -> ParticipantPublic:
    """Change caps; never below what is already spent (409)."""
    participant = participants.set_cap(
        session, name, epsilon=body.epsilon_cap, delta=body.delta_cap
    )
    return participant_public(participant)


@router.get("/me")
def me(session: ReadSessionDep, participant: CurrentParticipant) -> BudgetPublic:
    """The calling participant's own budget and itemised ledger."""
    return budget_of(session, participant)
