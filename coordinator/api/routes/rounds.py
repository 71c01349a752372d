"""Secure aggregation rounds: identity keys, round messages, admin control (thin routes)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response, status

from common.secagg.messages import SignedMessage
from common.secagg.schemas import IdentityKeyCreate, RoundPublic, RoundState
from coordinator.api.deps import (
    AdminDep,
    CurrentParticipant,
    KeysDep,
    SessionDep,
    StudyMember,
    StudyReader,
)
from coordinator.services import round_store, round_views, rounds

router = APIRouter(tags=["rounds"])


@router.post(
    "/me/identity-key",
    status_code=status.HTTP_201_CREATED,
    responses={200: {"description": "the same key was already registered"}},
)
def register_identity_key(
    body: IdentityKeyCreate,
    participant: CurrentParticipant,
    session: SessionDep,
    response: Response,
) -> IdentityKeyCreate:
    """Register this participant's long-term Ed25519 identity key (once; 409 for another)."""
    if not round_store.register_identity(session, participant, body.public_key):
        response.status_code = status.HTTP_200_OK
    return body


@router.post("/studies/{study_id}/rounds", status_code=status.HTTP_201_CREATED)
def open_round(study: StudyReader, session: SessionDep, _: AdminDep) -> RoundPublic:
    """Open the next release round of a secure study (admin)."""
    return round_views.round_public(session, rounds.open_round(session, study))


@router.get("/studies/{study_id}/rounds")
def list_rounds(study: StudyReader, session: SessionDep) -> list[RoundPublic]:
    """Every attempt of every round of the study: cohort, survivors, status."""
    return [round_views.round_public(session, r) for r in rounds.list_rounds(session, study.id)]


@router.get("/studies/{study_id}/rounds/current")
def current_round(
    study: StudyMember,
    participant: CurrentParticipant,
    session: SessionDep,
    known_roster: Annotated[
        str | None,
        Query(
            pattern=r"^[0-9a-f]{64}$",
            description="Digest of the roster the caller already holds: it is then left out.",
        ),
    ] = None,
) -> RoundState:
    """The current attempt, with the roster, unmask request and shares sealed for the caller."""
    return round_views.round_state(session, study, participant, known_roster)


@router.post("/studies/{study_id}/rounds/{number}/advance")
def advance_round(
    number: int, study: StudyReader, session: SessionDep, keys: KeysDep, _: AdminDep
) -> RoundPublic:
    """Declare members that have not acted lost: publish, restart without them, or finish."""
    return round_views.round_public(session, rounds.advance(session, keys, study, number))


@router.post("/studies/{study_id}/rounds/{number}/{step}")
def post_round_message(
    number: int,
    step: Literal["keys", "masked", "unmask"],
    body: SignedMessage,
    study: StudyMember,
    participant: CurrentParticipant,
    session: SessionDep,
    keys: KeysDep,
) -> RoundPublic:
    """A member's signed message: ``keys`` (this attempt's X25519 keys), ``masked`` (the
    masked vector; charges the release to its ledger), ``unmask`` (own self seed and the
    shares held of the others')."""
    rnd = rounds.post_message(session, keys, study, participant, number, step, body)
    return round_views.round_public(session, rnd)
