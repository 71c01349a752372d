"""Streaming mode: noisy gradient releases in, the online classifier out."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response, status
from sqlalchemy.orm import Session

from common.budget import PrivacyBudget
from common.online.wire import OnlineGradientCreate, OnlineGradientPublic, OnlineModelPublic
from coordinator.api.auth_route import AuthFirstRoute
from coordinator.api.deps import (
    Credentials,
    get_caller,
    participant_token,
    require_participant,
    study_member,
    study_reader,
)
from coordinator.api.onehop import in_one_hop
from coordinator.config import Settings
from coordinator.services import online, online_model

router = APIRouter(prefix="/studies", tags=["online"], route_class=AuthFirstRoute)


@router.post(
    "/{study_id}/online/gradients",
    status_code=status.HTTP_201_CREATED,
    responses={200: {"description": "replay of an earlier request with the same key"}},
    dependencies=[Depends(participant_token)],
)
async def create_gradient(
    study_id: str, body: OnlineGradientCreate, request: Request, creds: Credentials,
    response: Response,
) -> OnlineGradientPublic:
    """Store and charge one schedule window's noisy release (201; 200 for a replayed key).

    For members of a study with an online section. The claimed cost must be one schedule
    window's charge. With DP-FTRL (`algorithm: ftrl`, the default) the release is the
    increment of the member's noisy prefix sum; once `step_releases` releases are pending the
    weights move by -eta times their sum (count-0 releases included). With FLMB it is a noisy
    mini-batch gradient sum and the step is one SGD step on the summed sums. A release of the
    config's `centre_window` is summed into the served centre instead (after the first step it
    is charged but not summed: the centre is fixed). A noisy sum whose l2 norm is past the
    public bound (count x clip for DP-FTRL, count x radius_x for FLMB, window_slots x radius_x
    for a centring window, plus the noise's norm tail at 2^-40) is refused with 422 naming the
    bound, before anything is stored or charged.
    """

    def work(session: Session, settings: Settings) -> online.Outcome:
        participant = require_participant(get_caller(session, settings, creds))
        study = study_member(study_id, session, participant)
        return online.submit(session, participant, study, body)

    outcome = await in_one_hop(request, work)
    if outcome.replay:
        response.status_code = status.HTTP_200_OK
    r = outcome.release
    cost = PrivacyBudget.from_units(r.eps_units, r.delta_units)
    return OnlineGradientPublic(id=r.id, study_id=r.study_id, weights_version=r.weights_version,
                                epsilon=cost.epsilon, delta=cost.delta,
                                model_version=outcome.model_version)


@router.get("/{study_id}/online/model")
async def get_online_model(study_id: str, request: Request, creds: Credentials
                           ) -> OnlineModelPublic:
    """The current online classifier: weights, running average, centre, step count and
    pending releases (admin and members)."""

    def work(session: Session, settings: Settings) -> OnlineModelPublic:
        study = study_reader(study_id, session, get_caller(session, settings, creds))
        return online_model.model_public(session, study)

    return await in_one_hop(request, work)
