"""Private cohort rounds: public state and final model, participants' releases, admin control."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Path, Response, status
from sqlalchemy.orm import Session

from common.cohorts.protocol import CohortState
from common.cohorts.schemas import CohortReleaseCreate, CohortRoundPublic, CohortsPublic
from coordinator.api.deps import AdminDep, CurrentParticipant, SessionDep, StudyMember, StudyReader
from coordinator.cohort_tables import CohortRound
from coordinator.models import Study
from coordinator.services import cohorts

router = APIRouter(tags=["cohorts"])
RoundNumber = Annotated[int, Path(ge=1, le=1000, description="Round number, 1 to T.")]


def round_public(session: Session, rnd: CohortRound) -> CohortRoundPublic:
    return CohortRoundPublic(
        number=rnd.number, status=rnd.status,  # type: ignore[arg-type]
        expected=cohorts.expected(rnd), sent=cohorts.senders(session, rnd.study_id, rnd.number),
        detail=rnd.detail, created_at=rnd.created_at, finished_at=rnd.finished_at)


def cohorts_public(session: Session, study: Study) -> CohortsPublic:
    """The run as everyone may see it: released and public values only."""
    _, params, protocol = cohorts.cohort_setup(study)
    history = [round_public(session, r) for r in cohorts.rounds_of(session, study.id)]
    result = cohorts.result_of(session, study.id)
    base = CohortsPublic(study_id=study.id, method=params.method, rounds=protocol.rounds,
                         status="not_started", history=history)
    if result is not None:
        return base.model_copy(update={"status": "done", "model": json.loads(result.model)})
    if not history:
        return base
    current = cohorts.rounds_of(session, study.id)[-1]
    return base.model_copy(update={"status": "running", "round": current.number,
                                   "state": CohortState.from_json(current.state).data})


@router.get("/studies/{study_id}/cohorts")
def get_cohorts(study: StudyReader, session: SessionDep) -> CohortsPublic:
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
