"""Studies: create and list (admin), add members (admin), read the signed config."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from common.study.signing import SignedConfig
from common.wire.schemas import MemberAdd, StudyCreate, StudyPublic
from coordinator.api.auth_route import AuthFirstRoute
from coordinator.api.deps import AdminDep, KeysDep, ReadSessionDep, SessionDep, StudyReader
from coordinator.services import studies

router = APIRouter(prefix="/studies", tags=["studies"], route_class=AuthFirstRoute)


@router.post("", status_code=status.HTTP_201_CREATED)
def create_study(body: StudyCreate, session: SessionDep, keys: KeysDep, _: AdminDep) -> StudyPublic:
    """Create a study: fresh hash seeds, LSH digest, signed config version 1."""
    study = studies.create_study(session, keys, body)
    return studies.study_public(session, study)


@router.get("")
def list_studies(session: ReadSessionDep, _: AdminDep) -> list[StudyPublic]:
    """Every study with its config and contributor count."""
    return [studies.study_public(session, s) for s in studies.list_studies(session)]


@router.post("/{study_id}/members", status_code=status.HTTP_204_NO_CONTENT)
def add_member(study_id: str, body: MemberAdd, session: SessionDep, _: AdminDep) -> Response:
    """Let a participant read and contribute to the study."""
    studies.add_member(session, study_id, body.participant)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/{study_id}/config")
def get_config(_: ReadSessionDep, study: StudyReader) -> SignedConfig:
    """The study's current signed config (members and admin), read in a snapshot."""
    return studies.signed_config(study)
