"""What ends each phase of a secure aggregation round (the state machine that calls these is
:mod:`coordinator.services.secagg`): the roster published (keys -> masking), the recovery
request (unmask -> recover), and the reveal: the sum unmasked, checked and merged (done), or
the reason it was not (rejected, abandoned).
"""

from __future__ import annotations

import functools
import logging

from sqlalchemy.orm import Session

from common.config import StudyConfig
from common.errors import Conflict, SecureSumRejected
from common.secagg import server
from common.secagg.checks import check_secure_sum
from common.secagg.messages import RoundRef, RoundRefused, SignedMessage, b64d
from common.secagg.params import AggregationParams
from common.secagg.roster import VerifiedRoster
from coordinator.db.secagg import Round
from coordinator.db.tables import Study, utcnow
from coordinator.keys import KeyStore
from coordinator.services import secagg_store as store
from coordinator.services.studies import study_config

log = logging.getLogger("fedod.secagg")


def secure_params(study: Study) -> tuple[StudyConfig, AggregationParams]:
    """The study's config and its secure aggregation parameters; 409 for independent noise."""
    config = study_config(study)
    if config.aggregation is None or config.aggregation.mode != "secure":
        raise Conflict(f"study {study.id!r} uses independent noise: it has no rounds")
    return config, config.aggregation


def ref(rnd: Round) -> RoundRef:
    return RoundRef(study_id=rnd.study_id, round=rnd.number, attempt=rnd.attempt)


def roster_of(rnd: Round, keys: KeyStore) -> VerifiedRoster:
    assert rnd.roster is not None
    signed = SignedMessage.model_validate_json(rnd.roster)
    return server.roster_of(signed, keys.private_key().public_key())


def finish(session: Session, rnd: Round, status: str, detail: str | None = None) -> None:
    rnd.status, rnd.detail, rnd.finished_at = status, detail, utcnow()
    log.info(
        "round finished",
        extra={"study": rnd.study_id, "round": rnd.number, "status": status, "detail": detail},
    )


def publish(session: Session, keys: KeyStore, study: Study, rnd: Round) -> None:
    config, params = secure_params(study)
    adverts = {
        name: (store.identity_of(session, store.participant_by_name(session, name)), b64d(frame))
        for name, frame in store.messages(session, rnd, "advert").items()
    }
    if len(adverts) < params.min_roster:
        finish(session, rnd, "abandoned", f"{len(adverts)} key adverts, fewer than n - D")
        return
    roster = server.build_roster(
        ref(rnd),
        adverts,
        config_digest=study.config_digest,
        modulus_bits=config.secure_modulus_bits(),
        threshold=params.threshold,
        key=keys.private_key(),
    )
    rnd.roster, rnd.status = roster.model_dump_json(), "masking"


def reveal(session: Session, keys: KeyStore, study: Study, rnd: Round) -> None:
    config, _ = secure_params(study)
    roster = roster_of(rnd, keys)
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
        finish(session, rnd, "abandoned", exc.message)
        return
    try:  # a member may have added anything to its own vector: not merged unless plausible
        check_secure_sum(config, total, len(roster.names))
    except SecureSumRejected as exc:  # the members stay charged: their noise was drawn
        finish(session, rnd, "rejected", exc.message)
        return
    store.replace_model(session, study.id, config, total, len(roster.names))
    finish(session, rnd, "done", f"{len(seeds)} of {len(roster.names)} answered the unmask")


def recover(session: Session, keys: KeyStore, rnd: Round, params: AggregationParams) -> None:
    """Unmask phase declared over: ask the members that answered for their shares of the seeds
    of those that did not (abandon if fewer than the threshold answered)."""
    roster = roster_of(rnd, keys)
    answered = store.messages(session, rnd, "unmask")
    if len(answered) < params.threshold:
        finish(session, rnd, "abandoned",
                f"{len(answered)} unmask answers, the threshold is {params.threshold}")
        return
    missing = [n for n in roster.names if n not in answered]
    rnd.request = server.build_recover(roster, missing, keys.private_key()).model_dump_json()
    rnd.status = "recover"
