"""Contributions: a participant's noisy release for a study."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status
from sqlalchemy.orm import Session

from common.budget import PrivacyBudget
from common.errors import BudgetExceeded
from common.schemas import ContributionCreate, ContributionPublic
from coordinator.api.deps import Credentials, ingest_caller
from coordinator.api.onehop import in_one_hop
from coordinator.config import Settings
from coordinator.metrics import CONTRIBUTIONS, EPSILON_CHARGED
from coordinator.models import Contribution
from coordinator.services.charge import Stored
from coordinator.services.contributions import Outcome, submit
from coordinator.services.refusals import record_refusal

router = APIRouter(prefix="/studies", tags=["contributions"])


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
    responses={200: {"description": "replay of an earlier request with the same key"}},
)
async def create_contribution(
    study_id: str,
    body: ContributionCreate,
    request: Request,
    creds: Credentials,
    response: Response,
) -> ContributionPublic:
    """Validate, store and charge one release (201; 200 for a replayed key).

    For members of the study. A later release of the same participant for the same study
    replaces its earlier one in the model; every release is charged.
    """

    def work(session: Session, settings: Settings) -> tuple[Outcome, str]:
        caller = ingest_caller(session, settings, creds, study_id, body.idempotency_key)
        try:
            outcome = submit(session, caller, body, max_decoded_bytes=settings.max_decoded_bytes)
        except Exception as exc:
            CONTRIBUTIONS.labels("refused").inc()
            if isinstance(exc, BudgetExceeded):  # shown on the dashboard
                record_refusal(session, caller.participant_id, study_id,
                               PrivacyBudget(body.epsilon, body.delta), exc)
            raise
        return outcome, caller.name

    outcome, name = await in_one_hop(request, work)
    if outcome.replay:
        response.status_code = status.HTTP_200_OK
        CONTRIBUTIONS.labels("replayed").inc()
    else:
        CONTRIBUTIONS.labels("accepted").inc()
        EPSILON_CHARGED.inc(outcome.contribution.eps_units)
    return contribution_public(outcome.contribution, name)
