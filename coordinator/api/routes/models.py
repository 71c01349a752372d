"""The merged global model of a study."""

from __future__ import annotations

from fastapi import APIRouter, Header, Request, Response, status
from sqlalchemy.orm import Session

from common.wire.schemas import ModelPublic
from coordinator.api.auth_route import AuthFirstRoute
from coordinator.api.deps import Credentials, member_or_admin, reader_token
from coordinator.api.onehop import in_one_hop
from coordinator.config import Settings
from coordinator.services import model_lookup
from coordinator.services.aggregate import cached_model, fold, model_json
from coordinator.services.studies import parse_config

router = APIRouter(prefix="/studies", tags=["models"], route_class=AuthFirstRoute)


@router.get(
    "/{study_id}/model",
    response_model=ModelPublic,
    responses={304: {"description": "unchanged since the ETag in If-None-Match"}},
)
async def get_model(
    study_id: str,
    request: Request,
    creds: Credentials,
    if_none_match: str | None = Header(default=None),
) -> Response:
    """Merged sums, contributor count and version; ETag / If-None-Match give 304.

    For the admin and members of the study. The sums are folded from the contributions
    stored since the last read, then cached per model version.
    """

    def work(session: Session, settings: Settings) -> Response:
        found = model_lookup.lookup(session.connection(), study_id, reader_token(settings, creds))
        reader = member_or_admin(found, study_id)
        config = parse_config(reader.config_payload)
        version = reader.version
        etag = f'"{study_id}-{config.version}-{version}"'
        headers = {"ETag": etag, "Cache-Control": "private, no-cache"}
        if if_none_match and etag in {t.strip() for t in if_none_match.split(",")}:
            return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers=headers)
        body = cached_model(config, version)
        if body is None:
            session.rollback()  # the fold opens its own (write) transaction
            snapshot = fold(session, study_id, config, version)
            headers["ETag"] = f'"{study_id}-{config.version}-{snapshot.version}"'
            body = model_json(snapshot, config)
        return Response(body, media_type="application/json", headers=headers)

    return await in_one_hop(request, work)
