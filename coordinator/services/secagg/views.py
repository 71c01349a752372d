"""Read models of rounds: what the admin, the dashboard and a member see of an attempt."""

from __future__ import annotations

from sqlalchemy.orm import Session

from common.secagg import server, view
from common.secagg.messages import RosterBody, SignedMessage, b64d, b64e
from common.secagg.roster import VerifiedRoster
from common.secagg.schemas import RoundPublic, RoundState, RoundStatus
from common.secagg.wire import WIRE
from coordinator.db.secagg import Round
from coordinator.db.tables import Participant, Study
from coordinator.keys import KeyStore
from coordinator.services.secagg import store
from coordinator.services.secagg.beacon import member_draw
from coordinator.services.secagg.phases import roster_of
from coordinator.services.secagg.rounds import current
from coordinator.services.secagg.store import missing_members
from coordinator.services.studies import study_config


def round_public(session: Session, rnd: Round) -> RoundPublic:
    n = store.counts(session, rnd)
    cohort = 0
    if rnd.roster is not None:
        payload = SignedMessage.model_validate_json(rnd.roster).payload
        cohort = RosterBody.model_validate_json(payload).size
    return RoundPublic(
        study_id=rnd.study_id,
        round=rnd.number,
        attempt=rnd.attempt,
        status=RoundStatus(rnd.status),
        expected=store.expected(rnd),
        cohort=cohort,
        masked=n["masked"],
        survivors=n["unmask"],
        recovered_by=n["shares"],
        detail=rnd.detail,
        created_at=rnd.created_at,
        finished_at=rnd.finished_at,
    )


def _inbox(session: Session, study: Study, rnd: Round, roster: VerifiedRoster, me: str
           ) -> dict[str, str]:
    """In the recover phase: the shares sealed for ``me`` by its graph neighbours lost after
    masking (only theirs: a holder is never handed shares it is not asked to reveal)."""
    if rnd.status != RoundStatus.RECOVER or rnd.request is None:
        return {}
    missing = set(missing_members(rnd, roster.names)) & set(roster.holders(me))
    cells = study_config(study).secure_cells
    return {
        owner: b64e(server.sealed_share(b64d(frame), roster, owner=owner, holder=me,
                                        n_cells=cells))
        for owner, frame in store.messages(session, rnd, "masked", sorted(missing)).items()
    }


def _neighbourhood(session: Session, rnd: Round, roster: VerifiedRoster, me: str,
                   known: bool) -> tuple[str, str]:
    """The advert frames (unless the caller holds the roster) and, in the unmask phase, the
    roster acknowledgements of ``me``'s graph neighbours, packed (common.secagg.roster)."""
    near = roster.holders(me)
    adverts = "" if known else server.neighbour_adverts(roster, me, {
        n: b64d(f) for n, f in store.messages(session, rnd, "advert", near).items()})
    acks = ""
    if rnd.status == RoundStatus.UNMASK:
        masked = {n: b64d(f) for n, f in store.messages(session, rnd, "masked", near).items()}
        acks = server.neighbour_acks(roster, me, masked)
    return adverts, acks


def round_state(
    session: Session,
    keys: KeyStore,
    study: Study,
    participant: Participant,
    known_roster: str | None = None,
    known_membership: str | None = None,
) -> RoundState:
    """The caller's view of the current attempt: the roster and its neighbours' adverts only
    if it does not hold that roster (``known_roster``, a roster digest), the membership
    certificate only if it does not hold that one (``known_membership``, its digest)."""
    rnd = current(session, study.id)
    public = round_public(session, rnd)
    me = participant.name
    sent = store.kinds_of(session, rnd, participant)
    mine = [k for k in ("advert", "masked", "unmask", "shares") if k in sent]
    # phase beacon: the roster is not final for members until the consortium signed it
    roster = (SignedMessage.model_validate_json(rnd.roster)
              if rnd.roster and rnd.status != RoundStatus.BEACON else None)
    digest = roster.digest() if roster else None
    known = digest is not None and digest == known_roster
    adverts = acks = ""
    inbox: dict[str, str] = {}
    request = (SignedMessage.model_validate_json(rnd.request)
               if rnd.request and rnd.status in (RoundStatus.UNMASK, RoundStatus.RECOVER) else None)
    if roster is not None and rnd.status in (RoundStatus.MASKING, RoundStatus.UNMASK,
                                               RoundStatus.RECOVER):
        verified = roster_of(session, rnd, keys)
        if me in verified.names:
            adverts, acks = _neighbourhood(session, rnd, verified, me, known)
            inbox = _inbox(session, study, rnd, verified, me)
        if rnd.status == RoundStatus.RECOVER:  # the lost members this caller neighbours, or none
            near = sorted(inbox)
            request = server.build_recover(verified, near, keys.private_key()) if near else None
    certificate = store.membership(session, study.id) if roster is not None else None
    if certificate is not None and certificate.digest() == known_membership:
        certificate = None
    # counts only once it is over
    over = rnd.status in (RoundStatus.DONE, RoundStatus.REJECTED, RoundStatus.ABANDONED)
    counts = {"cohort", "masked", "survivors", "recovered_by"}
    left_out = {"study_id", "created_at", "finished_at", "expected"} | (set() if over else counts)
    return RoundState(  # compact (common.secagg.view): what the member knows is left out
        **public.model_dump(exclude=left_out),
        expected=[me] if me in public.expected else [],  # O(1), not the n names
        roster=None if known or roster is None else view.compact(roster),
        roster_digest=None if known or roster is not None else digest,
        adverts=adverts,
        membership=certificate,
        beacon=rnd.beacon if roster is not None and not known else None,  # beacon studies
        draw=member_draw(rnd, me) if roster is not None and not known else None,  # its own
        request=None if request is None else view.compact(request),
        acks=acks,
        inbox=inbox,
        done=mine,
        wire=WIRE,
    )
