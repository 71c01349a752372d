"""Secure aggregation rounds: a thin state machine around :mod:`common.secagg.server`.

    keys ──(every expected advert, or admin advance with >= n - D)──► masking
    (beacon studies only: keys ──► beacon ──(the consortium's beacon signature)──► masking,
     coordinator.services.secagg.beacon; attempts above common.secagg.beacon.BEACON_ATTEMPTS
     are never opened: the round is abandoned instead)
    masking ──(every roster vector)──► unmask ──(every answer)──► done (model replaced)
    masking ──(admin advance: someone never sent its vector)──► restarted, attempt + 1 without it
    unmask ──(admin advance: >= threshold answers)──► recover; fewer ──► abandoned
    recover ──(shares from every answerer neighbouring a lost member, or admin advance)──►
               done, or abandoned when some lost member's seed has fewer than threshold shares
    done ◄── only if the revealed sum passes :func:`common.secagg.checks.check_secure_sum`;
               else rejected (not merged: the model keeps its last value, the members stay
               charged, the next round opens as after any finished round)

The members' messages are binary frames (:mod:`common.secagg.wire`), stored as base64.

Every message takes the lock of its round row, so transitions are exact with any number of
workers. Only the admin's ``advance`` declares members lost: the coordinator never guesses
from a clock. What ends each phase (roster, recovery request, reveal and merge) is
:mod:`coordinator.services.secagg.phases`.
"""

from __future__ import annotations

import json
import logging

from sqlalchemy import select
from sqlalchemy.orm import Session

from common.errors import Conflict, NotFound
from common.secagg import server
from common.secagg.beacon import BEACON_ATTEMPTS
from common.secagg.messages import RoundRefused, b64d, b64e
from common.secagg.schemas import RoundStatus
from coordinator.db.secagg import Round
from coordinator.db.tables import Member, Participant, Study
from coordinator.keys import KeyStore
from coordinator.services.secagg import phases, store

log = logging.getLogger("fedod.secagg")
OPEN = (RoundStatus.KEYS, RoundStatus.BEACON, RoundStatus.MASKING, RoundStatus.UNMASK,
        RoundStatus.RECOVER)


def current(session: Session, study_id: str, *, lock: bool = False) -> Round:
    query = (
        select(Round)
        .where(Round.study_id == study_id)
        .order_by(Round.number.desc(), Round.attempt.desc())
        .limit(1)
    )
    if lock:
        query = query.with_for_update()
    rnd = session.scalar(query.execution_options(populate_existing=True))
    if rnd is None:
        raise NotFound(f"study {study_id!r} has no round yet; the admin opens one")
    return rnd


def list_rounds(session: Session, study_id: str | None = None) -> list[Round]:
    query = select(Round).order_by(Round.study_id, Round.number, Round.attempt)
    if study_id is not None:
        query = query.where(Round.study_id == study_id)
    return list(session.scalars(query))


def open_round(session: Session, study: Study) -> Round:
    """Open the next round with exactly the certified members (the consortium's membership
    certificate) that are active and registered their certified identity key."""
    _, params = phases.secure_params(study)
    last = session.scalar(
        select(Round).where(Round.study_id == study.id).order_by(Round.id.desc()).limit(1)
    )
    if last is not None and last.status in OPEN:
        raise Conflict(f"round {last.number} of {study.id!r} is still open ({last.status})")
    ids = list(session.scalars(select(Member.participant_id).where(Member.study_id == study.id)))
    names = store.certified_cohort(session, study.id, ids)
    if len(names) < params.min_roster:
        raise Conflict(
            f"only {len(names)} certified members of {study.id!r} have registered their "
            f"identity keys; a round needs at least {params.min_roster} (n - dropouts)"
        )
    rnd = Round(
        study_id=study.id,
        number=(last.number + 1) if last else 1,
        attempt=1,
        status=RoundStatus.KEYS,
        expected=json.dumps(names),
    )
    session.add(rnd)
    session.commit()
    log.info("round opened", extra={"study": study.id, "round": rnd.number})
    return rnd


def _locked(session: Session, study: Study, number: int, phase: RoundStatus) -> Round:
    rnd = current(session, study.id, lock=True)
    if rnd.number != number:
        raise RoundRefused(f"round {number} is not the current round ({rnd.number})")
    if rnd.status != phase:
        raise RoundRefused(
            f"round {rnd.number} attempt {rnd.attempt} is in phase {rnd.status!r}, "
            f"not {phase!r}: message refused (out of order or replayed)"
        )
    return rnd


STEPS: dict[str, tuple[RoundStatus, str]] = {
    "keys": (RoundStatus.KEYS, "advert"),
    "masked": (RoundStatus.MASKING, "masked"),
    "unmask": (RoundStatus.UNMASK, "unmask"),
    "shares": (RoundStatus.RECOVER, "shares"),
}
"""Route step -> (the phase it belongs to, the message kind stored)."""


def post_message(
    session: Session,
    keys: KeyStore,
    study: Study,
    participant: Participant,
    number: int,
    step: str,
    message: bytes,
) -> Round:
    """Check one member's frame against the open attempt, store it (a masked vector is
    charged to the member's ledger in the same transaction), then move the round on when
    every member has sent this kind of message."""
    phase, kind = STEPS[step]
    config, _ = phases.secure_params(study)
    identity = store.identity_of(session, participant)
    rnd = _locked(session, study, number, phase)
    name = participant.name
    if kind == "advert":
        if name not in store.expected(rnd):
            raise RoundRefused(f"{name!r} is not in this attempt's cohort")
        server.accept_advert(message, ref=phases.ref(rnd), name=name, identity=identity)
    elif kind == "masked":
        server.accept_masked(message, phases.roster_of(session, rnd, keys), name=name,
                             identity=identity, n_cells=config.secure_cells)
    elif kind == "unmask":
        roster = phases.roster_of(session, rnd, keys)
        masked = store.messages(session, rnd, "masked", [name])
        if name not in masked:
            raise RoundRefused(f"{name!r} sent no masked vector in this attempt: no unmask taken")
        server.accept_unmask(message, roster, name=name, identity=identity,
                             commitment=server.commitment_of(b64d(masked[name]), roster,
                                                             config.secure_cells))
    else:
        if name not in store.messages(session, rnd, "unmask", [name]):
            raise RoundRefused(f"{name!r} did not answer the unmask request: no shares taken")
        roster = phases.roster_of(session, rnd, keys)
        server.accept_shares(message, roster, name=name, identity=identity,
                             missing=store.missing_members(rnd, roster.names))
    payload = b64e(message)
    if not store.stored_message(session, rnd, participant, kind, payload):
        if kind == "masked":
            store.charge_release(session, participant, rnd, config.version,
                                 config.release_cost(), message)
        store.store_message(session, rnd, participant, kind, payload)
        session.flush()
        _move_on(session, keys, study, rnd, kind)
    session.commit()
    return rnd


def _move_on(session: Session, keys: KeyStore, study: Study, rnd: Round, kind: str) -> None:
    received = sorted(store.messages(session, rnd, kind))
    if kind == "advert":
        if len(received) == len(store.expected(rnd)):
            phases.publish(session, keys, study, rnd)
        return
    roster = phases.roster_of(session, rnd, keys)
    if kind == "shares":
        answered = set(store.messages(session, rnd, "unmask"))
        missing = store.missing_members(rnd, roster.names)
        if received == server.helpers(roster, answered, missing):
            phases.reveal(session, keys, study, rnd)
        return
    if received != roster.names:
        return
    if kind == "masked":
        request = server.build_request(roster, len(roster.names), keys.private_key())
        rnd.request, rnd.status = request.model_dump_json(), RoundStatus.UNMASK
    else:
        phases.reveal(session, keys, study, rnd)


def _open_attempt(session: Session, study: Study, number: int) -> Round:
    """The open attempt of round ``number``, locked; ``Conflict`` when it is not open."""
    rnd = current(session, study.id, lock=True)
    if rnd.number != number or rnd.status not in OPEN:
        raise Conflict(f"round {number} of {study.id!r} is not open")
    return rnd


def advance(session: Session, keys: KeyStore, study: Study, number: int) -> Round:
    """Admin: declare the members that have not acted in this phase lost, and move on."""
    _, params = phases.secure_params(study)
    rnd = _open_attempt(session, study, number)
    if rnd.status == RoundStatus.KEYS:
        phases.publish(session, keys, study, rnd)
    elif rnd.status == RoundStatus.BEACON:
        raise Conflict(f"round {number} attempt {rnd.attempt} of {study.id!r} waits for the "
                       "consortium's beacon signature ('fedod-consortium beacon'); nobody "
                       "can be declared lost before the roster is final (abort ends it)")
    elif rnd.status == RoundStatus.MASKING:
        masked = sorted(store.messages(session, rnd, "masked"))
        phases.finish(
            session,
            rnd,
            RoundStatus.RESTARTED,
            f"{len(masked)} masked vectors; restarting without the members lost before masking",
        )
        if len(masked) < params.min_roster:
            rnd.status = RoundStatus.ABANDONED
        elif params.needs_beacon and rnd.attempt >= BEACON_ATTEMPTS:
            rnd.status, rnd.detail = RoundStatus.ABANDONED, (
                f"attempt {rnd.attempt} lost members before masking, and the consortium "
                f"beacon signs at most {BEACON_ATTEMPTS} attempts per round: open the next "
                "round")
        else:
            session.add(
                Round(
                    study_id=study.id,
                    number=rnd.number,
                    attempt=rnd.attempt + 1,
                    status=RoundStatus.KEYS,
                    expected=json.dumps(masked),
                )
            )
    elif rnd.status == RoundStatus.UNMASK:
        phases.recover(session, keys, rnd, params)
    else:
        phases.reveal(session, keys, study, rnd)
    session.commit()
    return current(session, study.id)


def abort_round(session: Session, study: Study, number: int) -> Round:
    """Admin: end the open attempt of round ``number`` as ``abandoned`` (no sum is revealed;
    members that already sent a masked vector stay charged, as after any abandoned round)."""
    phases.secure_params(study)
    rnd = _open_attempt(session, study, number)
    phases.finish(session, rnd, RoundStatus.ABANDONED, f"aborted by the administrator in phase "
                                             f"{rnd.status!r}")
    session.commit()
    return rnd
