"""Read models of rounds: what the admin, the dashboard and a member see of an attempt."""

from __future__ import annotations

from sqlalchemy.orm import Session

from common.secagg import server
from common.secagg.messages import RosterBody, SignedMessage, b64d, b64e
from common.secagg.schemas import RoundPublic, RoundState
from coordinator.db.secagg import Round
from coordinator.db.tables import Participant, Study
from coordinator.keys import KeyStore
from coordinator.services import secagg_store as store
from coordinator.services.secagg import current
from coordinator.services.secagg_store import missing_members
from coordinator.services.studies import study_config


def round_public(session: Session, rnd: Round) -> RoundPublic:
    n = store.counts(session, rnd)
    cohort = 0
    if rnd.roster is not None:
        payload = SignedMessage.model_validate_json(rnd.roster).payload
        cohort = len(RosterBody.model_validate_json(payload).members)
    return RoundPublic(
        study_id=rnd.study_id,
        round=rnd.number,
        attempt=rnd.attempt,
        status=rnd.status,  # type: ignore[arg-type]
        expected=store.expected(rnd),
        cohort=cohort,
        masked=n["masked"],
        survivors=n["unmask"],
        recovered_by=n["shares"],
        detail=rnd.detail,
        created_at=rnd.created_at,
        finished_at=rnd.finished_at,
    )


def _inbox(session: Session, keys: KeyStore, study: Study, rnd: Round, me: str) -> dict[str, str]:
    """In the recover phase: the shares sealed for ``me`` by the members lost after masking
    (only theirs: a holder is never handed shares it is not asked to reveal)."""
    if rnd.status != "recover" or rnd.roster is None or rnd.request is None:
        return {}
    missing = set(missing_members(rnd))
    roster = server.roster_of(SignedMessage.model_validate_json(rnd.roster),
                              keys.private_key().public_key())
    if me not in roster.members:
        return {}
    cells = study_config(study).secure_cells
    return {
        owner: b64e(server.sealed_share(b64d(frame), roster, owner=owner, holder=me,
                                        n_cells=cells))
        for owner, frame in store.messages(session, rnd, "masked").items()
        if owner in missing and owner != me
    }


def round_state(
    session: Session,
    keys: KeyStore,
    study: Study,
    participant: Participant,
    known_roster: str | None = None,
) -> RoundState:
    """The caller's view of the current attempt; the roster itself only if it is not the one
    the caller says it holds (``known_roster``, a roster digest)."""
    rnd = current(session, study.id)
    public = round_public(session, rnd)
    mine = [
        k
        for k in ("advert", "masked", "unmask", "shares")
        if participant.name in store.messages(session, rnd, k)
    ]
    inbox = _inbox(session, keys, study, rnd, participant.name)
    roster = SignedMessage.model_validate_json(rnd.roster) if rnd.roster else None
    digest = roster.digest() if roster else None
    return RoundState(
        **public.model_dump(),
        roster=None if digest is not None and digest == known_roster else roster,
        roster_digest=digest,
        membership=(store.membership(session, study.id)
                    if roster is not None and digest != known_roster else None),
        request=SignedMessage.model_validate_json(rnd.request) if rnd.request else None,
        inbox=inbox,
        done=mine,  # type: ignore[arg-type]
    )
