"""Contributions: a participant's noisy release for a study."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from fastapi import APIRouter, Request, Response, status
from sqlalchemy.orm import Session

from common.budget import PrivacyBudget
from common.errors import BudgetExceeded
from common.wire.schemas import ContributionCreate, ContributionPublic
from coordinator.api.auth_route import AuthFirstRoute
from coordinator.api.deps import ParticipantToken, member_or_admin
from coordinator.config import Settings
from coordinator.db.tables import Contribution
from coordinator.ledger.refusals import record_refusal
from coordinator.ledger.releases import Stored
from coordinator.metrics import CONTRIBUTIONS, EPSILON_CHARGED
from coordinator.services import contributions
from coordinator.services.contributions import Outcome, Prepared
from coordinator.services.group_commit import ALONE, writer_of
from coordinator.services.ingest_lookup import IngestCaller

log = logging.getLogger("fedod.contributions")
T = TypeVar("T")
router = APIRouter(prefix="/studies", tags=["contributions"], route_class=AuthFirstRoute)


def contribution_public(
    contribution: Stored | Contribution, participant: str
) -> ContributionPublic:
    cost = PrivacyBudget.from_units(contribution.eps_units, contribution.delta_units)
    return ContributionPublic(
        id=contribution.id,
        study_id=contribution.study_id,
        participant=participant,
        config_version=contribution.config_version,
        epsilon=cost.epsilon,
        delta=cost.delta,
        created_at=contribution.created_at,
        model_version=contribution.model_version,
    )


@router.post(
    "/{study_id}/contributions",
    status_code=status.HTTP_201_CREATED,
    response_model=ContributionPublic,
    responses={200: {"description": "replay of an earlier request with the same key",
                     "model": ContributionPublic}},
)
async def create_contribution(
    study_id: str,
    body: ContributionCreate,
    request: Request,
    token: ParticipantToken,
) -> Response:
    """Validate, store and charge one release (201; 200 for a replayed key).

    For members of the study. A later release of the same participant for the same study
    replaces its earlier one in the model; every release is charged. A cell outside the
    public bound (max_records plus the noise tail at 2^-40, a sparse grid's threshold) or LSH
    table totals that disagree past their noise tails are refused with 422 naming the bound,
    before anything is stored or charged.
    """

    settings: Settings = request.app.state.settings
    named: list[IngestCaller] = []

    def read(session: Session, found: IngestCaller | None) -> Outcome | Prepared:
        caller = member_or_admin(found, study_id)
        named.append(caller)
        return counted(session, caller, body, lambda: contributions.prepare(
            session, caller, body, max_decoded_bytes=settings.max_decoded_bytes))

    def settle(session: Session, prepared: Prepared, result: str) -> Outcome:
        alone = contributions.store_one if result == ALONE else contributions.refuse_charge
        return counted(session, named[0], body, lambda: alone(session, prepared))

    wanted = (token, study_id, body.idempotency_key)
    step = await writer_of(request.app.state).run(wanted, read, settle)
    caller = named[0]
    if step.replay:
        CONTRIBUTIONS.labels("replayed").inc()
    else:
        CONTRIBUTIONS.labels("accepted").inc()
        EPSILON_CHARGED.inc(step.contribution.eps_units)
        log.info("contribution stored", extra={
            "study": study_id, "participant": caller.name, "id": step.contribution.id})
    # serialised here, once (FastAPI would validate the model again, then encode it)
    return Response(contribution_public(step.contribution, caller.name).model_dump_json(),
                    status_code=status.HTTP_200_OK if step.replay else status.HTTP_201_CREATED,
                    media_type="application/json")


def counted(session: Session, caller: IngestCaller, body: ContributionCreate,
            work: Callable[[], T]) -> T:
    """``work()``; a refusal is counted, and shown on the dashboard if over budget."""
    try:
        return work()
    except Exception as exc:
        CONTRIBUTIONS.labels("refused").inc()
        if isinstance(exc, BudgetExceeded):
            record_refusal(session, caller.participant_id, caller.study_id or "",
                           PrivacyBudget(body.epsilon, body.delta), exc)
        raise
