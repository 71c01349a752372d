"""Private cohort rounds: public state and final model, participants' releases, admin control."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response, status

from common.cohorts.schemas import CohortReleaseCreate, CohortRoundPublic, CohortsPublic
from coordinator.api.auth_route import AuthFirstRoute
from coordinator.api.deps import (
    AdminDep,
    CurrentParticipant,
    ReadSessionDep,
    SessionDep,
    StudyMember,
    StudyReader,
)
from coordinator.services import cohorts
from coordinator.services.cohorts_views import cohorts_public, round_public

router = APIRouter(tags=["cohorts"], route_class=AuthFirstRoute)
RoundNumber = Annotated[int, Path(ge=1, le=1000, description="Round number, 1 to T.")]


@router.get("/studies/{study_id}/cohorts")
def get_cohorts(session: ReadSessionDep, study: StudyReader) -> CohortsPublic:
    """The cohort run: the open round and its public state, or the released cohort model."""
    return cohorts_public(session, study)


@router.post("/studies/{study_id}/cohorts", status_code=status.HTTP_201_CREATED)
def start_cohorts(study: StudyReader, session: SessionDep, _: AdminDep) -> CohortsPublic:
    """Open cohort round 1 for the study's active members (admin; once per study)."""
    cohorts.start(session, study)
    return cohorts_public(session, study)


@router.post("/studies/{study_id}/cohorts/rounds/{number}/close")
def close_round(number: RoundNumber, study: StudyReader, session: SessionDep,
                _: AdminDep) -> CohortRoundPublic:
    """Close an open round with the releases received so far; the next round waits for them."""
    return round_public(session, cohorts.close(session, study, number))


@router.post(
    "/studies/{study_id}/cohorts/rounds/{number}",
    status_code=status.HTTP_201_CREATED,
    responses={200: {"description": "a retry: the same release was already stored"}},
)
def post_release(number: RoundNumber, body: CohortReleaseCreate, study: StudyMember,
                 participant: CurrentParticipant, session: SessionDep,
                 response: Response) -> CohortRoundPublic:
    """A member's noisy vector for round ``number``: charged to its ledger, stored once."""
    before = set(cohorts.senders(session, study.id, number))
    rnd = cohorts.post_release(session, study, participant, number, body)
    if participant.name in before:
        response.status_code = status.HTTP_200_OK
    return round_public(session, rnd)
