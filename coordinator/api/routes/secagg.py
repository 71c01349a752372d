"""Secure aggregation rounds: identity keys, round messages, admin control (thin routes)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response, status

from common.secagg.membership import SignedMembership
from common.secagg.schemas import (
    BeaconCreate,
    BeaconPending,
    IdentityKeyCreate,
    RoundPublic,
    RoundState,
)
from common.secagg.wire import OCTET_STREAM
from coordinator.api.auth_route import AuthFirstRoute
from coordinator.api.deps import (
    AdminDep,
    CurrentParticipant,
    KeysDep,
    ReadSessionDep,
    SessionDep,
    StudyMember,
    StudyReader,
)
from coordinator.services.secagg import auto, beacon, rounds, store, views
from coordinator.services.secagg.phases import secure_params

router = APIRouter(tags=["secure aggregation"], route_class=AuthFirstRoute)


@router.post(
    "/me/identity-key",
    status_code=status.HTTP_201_CREATED,
    responses={200: {"description": "the same key was already registered"}},
)
def register_identity_key(
    body: IdentityKeyCreate,
    participant: CurrentParticipant,
    session: SessionDep,
    keys: KeysDep,
    response: Response,
) -> IdentityKeyCreate:
    """Register this participant's long-term Ed25519 identity key with a proof that it holds
    it (once; 422 bad proof; 409 another key, or a key another participant registered)."""
    if not store.register_identity(session, participant, body, keys.key_id()):
        response.status_code = status.HTTP_200_OK
    return body


@router.put("/studies/{study_id}/membership")
def put_membership(
    body: SignedMembership, study: StudyReader, session: SessionDep, _: AdminDep
) -> SignedMembership:
    """Store the consortium-signed membership certificate of a secure study (admin; members
    verify its signature under the consortium key they pinned, the coordinator cannot sign)."""
    params = secure_params(study)[1]
    store.save_membership(session, study.id, params, body)
    return body


@router.get("/studies/{study_id}/membership")
def get_membership(session: ReadSessionDep, study: StudyMember) -> SignedMembership:
    """The study's membership certificate as uploaded (404 before one is)."""
    signed = store.membership(session, study.id)
    if signed is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no membership certificate uploaded")
    return signed


@router.post("/studies/{study_id}/rounds", status_code=status.HTTP_201_CREATED)
def open_round(study: StudyReader, session: SessionDep, _: AdminDep) -> RoundPublic:
    """Open the next release round of a secure study (admin)."""
    return views.round_public(session, rounds.open_round(session, study))


@router.get("/studies/{study_id}/rounds")
def list_rounds(session: ReadSessionDep, study: StudyReader) -> list[RoundPublic]:
    """Every attempt of every round of the study: cohort, survivors, status."""
    return [views.round_public(session, r) for r in rounds.list_rounds(session, study.id)]


@router.get("/studies/{study_id}/rounds/current", response_model_exclude_defaults=True)
def current_round(
    session: ReadSessionDep,  # first: every read below is in its snapshot (no writer lock)
    study: StudyMember,
    participant: CurrentParticipant,
    keys: KeysDep,
    known_roster: Annotated[
        str | None,
        Query(
            pattern=r"^[0-9a-f]{64}$",
            description="Digest of the roster the caller already holds: it is then left out "
            "(with its neighbours' adverts).",
        ),
    ] = None,
    known_membership: Annotated[
        str | None,
        Query(
            pattern=r"^[0-9a-f]{64}$",
            description="Digest of the membership certificate the caller already holds: it "
            "is then left out.",
        ),
    ] = None,
) -> RoundState:
    """The caller's view of the current attempt, compact (fields at their defaults left out,
    and what the member knows: see ``RoundState`` and common/secagg/view.py; ``expected`` is
    the caller alone, or empty when it is not in the attempt), with the roster and its graph
    neighbours' adverts, the unmask request and their acknowledgements, the shares sealed for
    the caller
    (a study whose config says ``open_rounds: when_ready`` opens round 1 here once ready)."""
    auto.open_if_ready(session, study)
    return views.round_state(session, keys, study, participant, known_roster,
                                    known_membership)


@router.post("/studies/{study_id}/rounds/{number}/advance")
def advance_round(
    number: int, study: StudyReader, session: SessionDep, keys: KeysDep, _: AdminDep
) -> RoundPublic:
    """Declare members that have not acted lost: publish, restart without them, or finish."""
    return views.round_public(session, rounds.advance(session, keys, study, number))


async def frame_body(request: Request) -> bytes:
    """The raw request body of a frame; 415 unless it is sent as application/octet-stream."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != OCTET_STREAM:
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            f"a round message is a binary frame: send it as {OCTET_STREAM}",
        )
    return await request.body()


FRAME_DOC = {
    "requestBody": {
        "required": True,
        "description": "A binary frame (common/secagg/wire.py): kind (1 byte), round (8, "
        "little-endian), attempt (2), body, Ed25519 signature (64) over a context that also "
        "binds study, sender and (masked, unmask) the roster digest. Bodies: keys = X25519 key "
        "(32); masked = words packed to k bits + SHA-256 of the self-mask seed (32) + one "
        "32-byte sealed share per graph neighbour (by name; common/secagg/graph.py) + one "
        "16-byte roster acknowledgement per graph neighbour, in the same order "
        "(common.secagg.wire.ack_tag); unmask = the 16-byte "
        "self-mask seed; shares = 16 bytes per lost graph neighbour, in name order. Each "
        "length is exact: a truncated or padded frame is 422, a longer "
        "one 413, a tampered one 422, one of another round or attempt 409.",
        "content": {OCTET_STREAM: {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.get("/studies/{study_id}/rounds/beacon")
def beacon_pending(study_id: str, session: ReadSessionDep) -> BeaconPending:
    """The attempt waiting for the consortium's beacon signature, with its full signed roster
    (no credential: the consortium key holder is not a participant, and a roster names its
    members by a bitmap over the certificate only; 404, one answer, otherwise)."""
    return beacon.pending(session, study_id)


@router.post("/studies/{study_id}/rounds/{number}/beacon")
def post_beacon(number: int, study_id: str, body: BeaconCreate, session: SessionDep
                ) -> RoundPublic:
    """The consortium key's beacon signature over the waiting attempt's roster (no
    credential: it must verify under the key that signed the study's membership certificate;
    422 otherwise; 404, one answer, unless that attempt of that round waits for this roster's
    beacon). The attempt moves on to masking."""
    rnd = beacon.accept_beacon(session, study_id, number, body)
    return views.round_public(session, rnd)


@router.post("/studies/{study_id}/rounds/{number}/{step}", openapi_extra=FRAME_DOC)
def post_round_message(
    number: int,
    step: Literal["keys", "masked", "unmask", "shares"],
    study: StudyMember,
    participant: CurrentParticipant,
    session: SessionDep,
    keys: KeysDep,
    frame: Annotated[bytes, Depends(frame_body)],
) -> RoundPublic:
    """A member's signed frame: ``keys`` (this attempt's X25519 key), ``masked`` (the masked
    vector and its sealed seed shares; charges the release to its ledger), ``unmask`` (its own
    self-mask seed), ``shares`` (recover phase only: its 16-byte shares of the seeds of the
    lost members it neighbours; refused unless it answered this attempt's unmask request)."""
    rnd = rounds.post_message(session, keys, study, participant, number, step, frame)
    return views.round_public(session, rnd)
