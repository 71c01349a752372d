"""Secure aggregation rounds: a thin state machine around :mod:`common.secagg.server`.

    keys ──(every expected advert, or admin advance with >= n - D)──► masking
    masking ──(every roster vector)──► unmask ──(every answer)──► done (model replaced)
    masking ──(admin advance: someone never sent its vector)──► restarted, attempt + 1 without it
    unmask ──(admin advance: >= threshold answers)──► recover; fewer ──► abandoned
    recover ──(shares from every answerer, or admin advance)──► done, or abandoned when some
               lost member's seed has fewer than threshold shares
    done ◄── only if the revealed sum passes :func:`common.secagg.checks.check_secure_sum`;
               else rejected (not merged: the model keeps its last value, the members stay
               charged, the next round opens as after any finished round)

The members' own messages are binary frames (:mod:`common.secagg.wire`), stored as base64;
the shares answers of the recover phase (off the normal path) are signed JSON.

Every message takes the lock of its round row, so transitions are exact with any number of
workers. Only the admin's ``advance`` declares members lost: the coordinator never guesses
from a clock.
"""

from __future__ import annotations

import functools
import json
import logging

from sqlalchemy import select
from sqlalchemy.orm import Session

from common.config import StudyConfig
from common.errors import Conflict, NotFound, SecureSumRejected
from common.secagg import server
from common.secagg.checks import check_secure_sum
from common.secagg.messages import (
    RoundRef,
    RoundRefused,
    SignedMessage,
    b64d,
    b64e,
)
from common.secagg.params import AggregationParams
from common.secagg.roster import VerifiedRoster
from coordinator.db.secagg import Round
from coordinator.db.tables import Member, Participant, Study, utcnow
from coordinator.keys import KeyStore
from coordinator.services import secagg_store as store
from coordinator.services.studies import study_config

log = logging.getLogger("fedod.rounds")
OPEN = ("keys", "masking", "unmask", "recover")


def secure_params(study: Study) -> tuple[StudyConfig, AggregationParams]:
    """The study's config and its secure aggregation parameters; 409 for independent noise."""
    config = study_config(study)
    if config.aggregation is None or config.aggregation.mode != "secure":
        raise Conflict(f"study {study.id!r} uses independent noise: it has no rounds")
    return config, config.aggregation


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
    _, params = secure_params(study)
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
        status="keys",
        expected=json.dumps(names),
    )
    session.add(rnd)
    session.commit()
    log.info("round opened", extra={"study": study.id, "round": rnd.number})
    return rnd


def _ref(rnd: Round) -> RoundRef:
    return RoundRef(study_id=rnd.study_id, round=rnd.number, attempt=rnd.attempt)


def _roster(rnd: Round, keys: KeyStore) -> VerifiedRoster:
    assert rnd.roster is not None
    signed = SignedMessage.model_validate_json(rnd.roster)
    return server.roster_of(signed, keys.private_key().public_key())


def _locked(session: Session, study: Study, number: int, phase: str) -> Round:
    rnd = current(session, study.id, lock=True)
    if rnd.number != number:
        raise RoundRefused(f"round {number} is not the current round ({rnd.number})")
    if rnd.status != phase:
        raise RoundRefused(
            f"round {rnd.number} attempt {rnd.attempt} is in phase {rnd.status!r}, "
            f"not {phase!r}: message refused (out of order or replayed)"
        )
    return rnd


def _finish(session: Session, rnd: Round, status: str, detail: str | None = None) -> None:
    rnd.status, rnd.detail, rnd.finished_at = status, detail, utcnow()
    log.info(
        "round finished",
        extra={"study": rnd.study_id, "round": rnd.number, "status": status, "detail": detail},
    )


def _publish(session: Session, keys: KeyStore, study: Study, rnd: Round) -> None:
    config, params = secure_params(study)
    adverts = {
        name: (store.identity_of(session, store.participant_by_name(session, name)), b64d(frame))
        for name, frame in store.messages(session, rnd, "advert").items()
    }
    if len(adverts) < params.min_roster:
        _finish(session, rnd, "abandoned", f"{len(adverts)} key adverts, fewer than n - D")
        return
    roster = server.build_roster(
        _ref(rnd),
        adverts,
        config_digest=study.config_digest,
        modulus_bits=config.secure_modulus_bits(),
        threshold=params.threshold,
        key=keys.private_key(),
    )
    rnd.roster, rnd.status = roster.model_dump_json(), "masking"


def _reveal(session: Session, keys: KeyStore, study: Study, rnd: Round) -> None:
    config, _ = secure_params(study)
    roster = _roster(rnd, keys)
    who = functools.partial(store.identity_by_name, session)
    seeds = {
        name: server.accept_unmask(b64d(frame), roster, name=name, identity=who(name))
        for name, frame in store.messages(session, rnd, "unmask").items()
    }
    shares = {
        name: server.accept_shares(SignedMessage.model_validate_json(signed), roster, name=name,
                                   identity=who(name), missing=store.missing_members(rnd))
        for name, signed in store.messages(session, rnd, "shares").items()
    }
    words = {
        name: server.accept_masked(b64d(frame), roster, name=name, identity=who(name),
                                   n_cells=config.secure_cells)
        for name, frame in store.messages(session, rnd, "masked").items()
    }
    try:
        total = server.reveal_sum(roster, words, seeds, shares)
    except RoundRefused as exc:
        _finish(session, rnd, "abandoned", exc.message)
        return
    try:  # a member may have added anything to its own vector: not merged unless plausible
        check_secure_sum(config, total, len(roster.names))
    except SecureSumRejected as exc:  # the members stay charged: their noise was drawn
        _finish(session, rnd, "rejected", exc.message)
        return
    store.replace_model(session, study.id, config, total, len(roster.names))
    _finish(session, rnd, "done", f"{len(seeds)} of {len(roster.names)} answered the unmask")


STEPS: dict[str, tuple[str, str]] = {
    "keys": ("keys", "advert"),
    "masked": ("masking", "masked"),
    "unmask": ("unmask", "unmask"),
    "shares": ("recover", "shares"),
}
"""Route step -> (the phase it belongs to, the message kind stored)."""


def post_message(
    session: Session,
    keys: KeyStore,
    study: Study,
    participant: Participant,
    number: int,
    step: str,
    message: bytes | SignedMessage,
) -> Round:
    """Check one member's message (a frame, or for ``shares`` a signed JSON message) against
    the open attempt, store it (a masked vector is charged to the member's ledger in the same
    transaction), then move the round on when every member has sent this kind of message."""
    phase, kind = STEPS[step]
    config, _ = secure_params(study)
    identity = store.identity_of(session, participant)
    rnd = _locked(session, study, number, phase)
    name = participant.name
    if isinstance(message, SignedMessage):
        if kind != "shares" or name not in store.messages(session, rnd, "unmask"):
            raise RoundRefused(f"{name!r} did not answer the unmask request: no shares taken")
        server.accept_shares(message, _roster(rnd, keys), name=name, identity=identity,
                             missing=store.missing_members(rnd))
        payload = message.model_dump_json()
    else:
        if kind == "advert":
            if name not in store.expected(rnd):
                raise RoundRefused(f"{name!r} is not in this attempt's cohort")
            server.accept_advert(message, ref=_ref(rnd), name=name, identity=identity)
        elif kind == "masked":
            server.accept_masked(message, _roster(rnd, keys), name=name, identity=identity,
                                 n_cells=config.secure_cells)
        elif kind == "unmask":
            server.accept_unmask(message, _roster(rnd, keys), name=name, identity=identity)
        else:
            raise RoundRefused("a shares answer is signed JSON, not a frame")
        payload = b64e(message)
    if not store.stored_message(session, rnd, participant, kind, payload):
        if kind == "masked":
            assert isinstance(message, bytes)
            store.charge_release(session, participant, rnd, config, message)
        store.store_message(session, rnd, participant, kind, payload)
        session.flush()
        _move_on(session, keys, study, rnd, kind)
    session.commit()
    return rnd


def _move_on(session: Session, keys: KeyStore, study: Study, rnd: Round, kind: str) -> None:
    received = sorted(store.messages(session, rnd, kind))
    if kind == "advert":
        if len(received) == len(store.expected(rnd)):
            _publish(session, keys, study, rnd)
        return
    roster = _roster(rnd, keys)
    if kind == "shares":
        if received == sorted(store.messages(session, rnd, "unmask")):
            _reveal(session, keys, study, rnd)
        return
    if received != roster.names:
        return
    if kind == "masked":
        frames = {n: b64d(f) for n, f in store.messages(session, rnd, "masked").items()}
        request = server.build_request(roster, roster.names, keys.private_key(), frames)
        rnd.request, rnd.status = request.model_dump_json(), "unmask"
    else:
        _reveal(session, keys, study, rnd)


def advance(session: Session, keys: KeyStore, study: Study, number: int) -> Round:
    """Admin: declare the members that have not acted in this phase lost, and move on."""
    _, params = secure_params(study)
    rnd = current(session, study.id, lock=True)
    if rnd.number != number or rnd.status not in OPEN:
        raise Conflict(f"round {number} of {study.id!r} is not open")
    if rnd.status == "keys":
        _publish(session, keys, study, rnd)
    elif rnd.status == "masking":
        masked = sorted(store.messages(session, rnd, "masked"))
        _finish(
            session,
            rnd,
            "restarted",
            f"{len(masked)} masked vectors; restarting without the members lost before masking",
        )
        if len(masked) < params.min_roster:
            rnd.status = "abandoned"
        else:
            session.add(
                Round(
                    study_id=study.id,
                    number=rnd.number,
                    attempt=rnd.attempt + 1,
                    status="keys",
                    expected=json.dumps(masked),
                )
            )
    elif rnd.status == "unmask":
        _recover(session, keys, rnd, params)
    else:
        _reveal(session, keys, study, rnd)
    session.commit()
    return current(session, study.id)


def _recover(session: Session, keys: KeyStore, rnd: Round, params: AggregationParams) -> None:
    """Unmask phase declared over: ask the members that answered for their shares of the seeds
    of those that did not (abandon if fewer than the threshold answered)."""
    roster = _roster(rnd, keys)
    answered = store.messages(session, rnd, "unmask")
    if len(answered) < params.threshold:
        _finish(session, rnd, "abandoned",
                f"{len(answered)} unmask answers, the threshold is {params.threshold}")
        return
    missing = [n for n in roster.names if n not in answered]
    rnd.request = server.build_recover(roster, missing, keys.private_key()).model_dump_json()
    rnd.status = "recover"
