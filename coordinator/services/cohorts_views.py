"""Read models of cohort runs: what members, the admin, the CLI and the dashboard see."""

from __future__ import annotations

import json

from sqlalchemy import select
from sqlalchemy.orm import Session

from common.cohorts.marks import marks_of_public
from common.cohorts.protocol import CohortState
from common.cohorts.schemas import CohortRoundPublic, CohortsPublic
from coordinator.db.cohorts import CohortResult, CohortRound
from coordinator.db.tables import Study
from coordinator.services import cohorts


def rounds_of(session: Session, study_id: str) -> list[CohortRound]:
    query = select(CohortRound).where(CohortRound.study_id == study_id)
    return list(session.scalars(query.order_by(CohortRound.number)))


def result_of(session: Session, study_id: str) -> CohortResult | None:
    return session.get(CohortResult, study_id)


def round_public(session: Session, rnd: CohortRound) -> CohortRoundPublic:
    return CohortRoundPublic(
        number=rnd.number, status=rnd.status,  # type: ignore[arg-type]
        expected=cohorts.expected(rnd), sent=cohorts.senders(session, rnd.study_id, rnd.number),
        detail=rnd.detail, created_at=rnd.created_at, finished_at=rnd.finished_at)


def cohorts_public(session: Session, study: Study) -> CohortsPublic:
    """The run as everyone may see it: released and public values only."""
    _, params, protocol = cohorts.cohort_setup(study)
    history = [round_public(session, r) for r in rounds_of(session, study.id)]
    result = result_of(session, study.id)
    base = CohortsPublic(study_id=study.id, method=params.method, rounds=protocol.rounds,
                         status="not_started", history=history)
    if result is not None:
        done = base.model_copy(update={"status": "done", "model": json.loads(result.model)})
        marks = marks_of_public(protocol, done.model_dump(mode="json"))
        return done.model_copy(update={"marks": [list(m.flags) for m in marks]})
    if not history:
        return base
    current = rounds_of(session, study.id)[-1]
    if current.status == "failed":  # the run could not go on: the reason is in its detail
        return base.model_copy(update={"status": "failed"})
    return base.model_copy(update={"status": "running", "round": current.number,
                                   "state": CohortState.from_json(current.state).data})
