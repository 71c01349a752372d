"""Shared dependencies: the database session and who is calling (participant or admin).

Permission checks live here, not in the routes: ``AdminDep`` needs the admin token,
``CurrentParticipant`` an active participant credential, ``StudyReader`` admin or a member
of the study in the path, ``StudyMember`` a member only. A participant that is not a member
of a study gets the same 404 as for a study that does not exist (no existence oracle).
``ParticipantToken`` refuses the admin token on the participant routes that look their
caller up themselves. ``coordinator.api.auth_route`` answers 401/403 before any validation
error.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import select
from sqlalchemy.orm import Session

from coordinator.config import Settings
from coordinator.db.engine import READ
from coordinator.db.tables import Member, Participant, Study
from coordinator.keys import KeyStore
from coordinator.services.ingest_lookup import IngestCaller
from coordinator.services.model_lookup import ModelReader
from coordinator.services.participants import authenticate

bearer = HTTPBearer(auto_error=False, description="Participant credential or admin token")


def get_session(request: Request) -> Iterator[Session]:
    """One session per request; uncommitted work is rolled back when it closes."""
    with request.app.state.sessionmaker() as session:
        yield session


def get_read_session(session: Annotated[Session, Depends(get_session)]) -> Session:
    """The request's session with a read snapshot as its transaction (``db.READ``): on
    SQLite a deferred ``BEGIN`` that takes no writer lock, so the reads members poll (the
    round state, the rounds, the certificate, ``/me``) and the admin's (budgets, lists, the
    dashboard's pages) run beside each other and beside the writes instead of one at a time
    behind them. Declare it before any other dependency that reads
    (FastAPI solves them in order; the request's session is shared). A handler that must
    write after all ends the snapshot first (``session.commit()``)."""
    session.connection(execution_options=READ)
    return session


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_keys(request: Request) -> KeyStore:
    keys: KeyStore = request.app.state.keys
    return keys


SessionDep = Annotated[Session, Depends(get_session)]
ReadSessionDep = Annotated[Session, Depends(get_read_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
KeysDep = Annotated[KeyStore, Depends(get_keys)]
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]

UNAUTHENTICATED = "missing or invalid credential: send 'Authorization: Bearer <token>'"


def unauthorized(detail: str = UNAUTHENTICATED) -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"}
    )


def is_admin_token(settings: Settings, token: str | None) -> bool:
    """Constant-time comparison with the configured admin token."""
    expected = settings.admin_token
    if not token or not expected:
        return False
    return hmac.compare_digest(token.encode(), expected.encode())


@dataclass(frozen=True)
class Caller:
    """Who is calling: the admin (participant is None) or an active participant."""

    participant: Participant | None

    @property
    def is_admin(self) -> bool:
        return self.participant is None


def reader_token(settings: Settings, creds: Credentials) -> str | None:
    """The bearer credential: None for the admin token, 401 for none."""
    token = creds.credentials if creds else None
    if is_admin_token(settings, token):
        return None
    if not token:
        raise unauthorized()
    return token


def get_caller(session: SessionDep, settings: SettingsDep, creds: Credentials) -> Caller:
    """Resolve the bearer token to the admin or an active participant, else 401."""
    token = reader_token(settings, creds)
    if token is None:
        return Caller(None)
    participant = authenticate(session, token)
    if participant is None:
        raise unauthorized()
    if not participant.active:
        raise unauthorized(f"participant {participant.name!r} was revoked")
    return Caller(participant)


CallerDep = Annotated[Caller, Depends(get_caller)]


def require_admin(caller: CallerDep) -> None:
    """Admin only; a participant credential gets 403."""
    if not caller.is_admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this endpoint needs the admin token")


NOT_PARTICIPANT = "this endpoint needs a participant credential"


def require_participant(caller: CallerDep) -> Participant:
    """A participant credential; the admin token gets 403."""
    if caller.participant is None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, NOT_PARTICIPANT)
    return caller.participant


AdminDep = Annotated[None, Depends(require_admin)]
CurrentParticipant = Annotated[Participant, Depends(require_participant)]


def _no_study(study_id: str) -> HTTPException:
    """404 for a missing study, and the same answer for one the caller is not a member of
    (a 403 there would tell any participant which study ids exist)."""
    return HTTPException(status.HTTP_404_NOT_FOUND, f"no study {study_id!r}")


def _study_or_404(session: Session, study_id: str) -> Study:
    study = session.get(Study, study_id)
    if study is None:
        raise _no_study(study_id)
    return study


def _check_member(session: Session, study: Study, participant: Participant) -> None:
    found = session.scalar(
        select(Member.participant_id).where(
            Member.study_id == study.id, Member.participant_id == participant.id
        )
    )
    if found is None:
        raise _no_study(study.id)


def study_reader(study_id: str, session: SessionDep, caller: CallerDep) -> Study:
    """The study in the path, readable by the admin and its members."""
    study = _study_or_404(session, study_id)
    if caller.participant is not None:
        _check_member(session, study, caller.participant)
    return study


def study_member(study_id: str, session: SessionDep, participant: CurrentParticipant) -> Study:
    """The study in the path, for a participant that is a member of it."""
    study = _study_or_404(session, study_id)
    _check_member(session, study, participant)
    return study


StudyReader = Annotated[Study, Depends(study_reader)]
StudyMember = Annotated[Study, Depends(study_member)]


async def participant_token(request: Request, creds: Credentials) -> str:
    """The credential of a participant-only route that looks its caller up itself (one
    database hop instead of ``CurrentParticipant``): 401 for none, 403 for the admin token.
    A dependency, so the 403 comes before any validation error (``auth_route``); async, as
    it does no I/O."""
    token = reader_token(request.app.state.settings, creds)
    if token is None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, NOT_PARTICIPANT)
    return token


ParticipantToken = Annotated[str, Depends(participant_token)]


Found = TypeVar("Found", IngestCaller, ModelReader)


def member_or_admin(found: Found | None, study_id: str) -> Found:
    """``get_caller`` + ``study_reader`` (or ``study_member``) from one lookup of the caller.

    The same checks in the same order with the same answers as those dependencies (401
    unknown or revoked credential, 404 unknown study or not a member, with one detail); the
    admin's row counts as an active member.
    """
    if found is None:
        raise unauthorized()
    if not found.active:
        raise unauthorized(f"participant {found.name!r} was revoked")
    if found.study_id is None:
        raise _no_study(study_id)
    if not found.member:
        raise _no_study(study_id)
    return found
