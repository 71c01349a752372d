"""What ends each phase of a secure aggregation round (the state machine that calls these is
:mod:`coordinator.services.secagg.rounds`): the roster published (keys -> masking, or keys ->
beacon in a study whose masking graph needs the consortium's beacon: :mod:`.beacon`), the recovery
request (unmask -> recover), and the reveal: the sum unmasked, checked and merged (done), or
the reason it was not (rejected, abandoned).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections import OrderedDict

from sqlalchemy.orm import Session

from common.errors import Conflict, SecureSumRejected
from common.secagg import server
from common.secagg.checks import check_secure_sum
from common.secagg.messages import RoundRef, RoundRefused, SignedMessage, b64d
from common.secagg.params import AggregationParams
from common.secagg.roster import VerifiedRoster
from common.secagg.schemas import RoundStatus
from common.study.config import StudyConfig
from coordinator.db.secagg import Round
from coordinator.db.tables import Study, utcnow
from coordinator.keys import KeyStore
from coordinator.services.secagg import store
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


def certified_keys(session: Session, study_id: str) -> dict[str, str]:
    """Name -> certified identity key (base64) of the study's membership certificate."""
    signed = store.membership(session, study_id)
    if signed is None:
        raise Conflict(f"study {study_id!r} has no membership certificate")
    return signed.body().members


_ROSTERS: OrderedDict[tuple[int, str, str, str | None], VerifiedRoster] = OrderedDict()
_ROSTERS_KEPT = 16


def roster_of(session: Session, rnd: Round, keys: KeyStore) -> VerifiedRoster:
    """The attempt's roster, verified with every stored advert once per process: a signed
    roster never changes, and every member's ``rounds/current`` needs it, so re-reading the
    ``n`` adverts per request would cost O(n) per request and O(n^2) per round."""
    assert rnd.roster is not None
    signed = SignedMessage.model_validate_json(rnd.roster)
    key = (rnd.id, signed.digest(), keys.key_id(), rnd.beacon)
    if (hit := _ROSTERS.get(key)) is not None:
        return hit
    adverts = {n: b64d(f) for n, f in store.messages(session, rnd, "advert").items()}
    verified = server.roster_of(signed, keys.private_key().public_key(), adverts,
                                certified_keys(session, rnd.study_id))
    if rnd.beacon is not None:  # a beacon study: the consortium's signature seeds the graph
        verified = dataclasses.replace(verified, beacon=b64d(rnd.beacon, size=64))
    _ROSTERS[key] = verified
    while len(_ROSTERS) > _ROSTERS_KEPT:
        _ROSTERS.popitem(last=False)
    return verified


def finish(session: Session, rnd: Round, status: RoundStatus, detail: str | None = None) -> None:
    rnd.status, rnd.detail, rnd.finished_at = status, detail, utcnow()
    log.info(
        "round finished",
        extra={"study": rnd.study_id, "round": rnd.number, "status": status, "detail": detail},
    )


def publish(session: Session, keys: KeyStore, study: Study, rnd: Round) -> None:
    config, params = secure_params(study)
    adverts = {name: b64d(frame) for name, frame in store.messages(session, rnd, "advert").items()}
    if len(adverts) < params.min_roster:
        finish(session, rnd, RoundStatus.ABANDONED, f"{len(adverts)} key adverts, fewer than n - D")
        return
    roster = server.build_roster(
        ref(rnd),
        adverts,
        universe=list(certified_keys(session, study.id)),
        config_digest=study.config_digest,
        modulus_bits=config.secure_modulus_bits(),
        threshold=params.threshold,
        degree=params.degree,
        key=keys.private_key(),
    )
    # a sparse graph that can be bad waits for the consortium's beacon (beacon.py)
    rnd.roster = roster.model_dump_json()
    rnd.status = RoundStatus.BEACON if params.needs_beacon else RoundStatus.MASKING


def reveal(session: Session, keys: KeyStore, study: Study, rnd: Round) -> None:
    config, _ = secure_params(study)
    roster = roster_of(session, rnd, keys)
    who = functools.partial(store.identity_by_name, session)
    frames = {name: b64d(frame) for name, frame in store.messages(session, rnd, "masked").items()}
    commitments = {name: server.commitment_of(frame, roster, config.secure_cells)
                   for name, frame in frames.items()}
    seeds = {
        name: server.accept_unmask(b64d(frame), roster, name=name, identity=who(name),
                                   commitment=commitments[name])
        for name, frame in store.messages(session, rnd, "unmask").items()
    }
    shares = {
        name: server.accept_shares(b64d(signed), roster, name=name,
                                   identity=who(name),
                                   missing=store.missing_members(rnd, roster.names))
        for name, signed in store.messages(session, rnd, "shares").items()
    }
    words = {
        name: server.accept_masked(frame, roster, name=name, identity=who(name),
                                   n_cells=config.secure_cells)
        for name, frame in frames.items()
    }
    try:
        total = server.reveal_sum(roster, words, seeds, shares, commitments)
    except RoundRefused as exc:
        finish(session, rnd, RoundStatus.ABANDONED, exc.message)
        return
    try:  # a member may have added anything to its own vector: not merged unless plausible
        check_secure_sum(config, total, len(roster.names))
    except SecureSumRejected as exc:  # the members stay charged: their noise was drawn
        finish(session, rnd, RoundStatus.REJECTED, exc.message)
        return
    store.replace_model(session, study.id, config, total, len(roster.names))
    finish(session, rnd, RoundStatus.DONE,
           f"{len(seeds)} of {len(roster.names)} answered the unmask")


def recover(session: Session, keys: KeyStore, rnd: Round, params: AggregationParams) -> None:
    """Unmask phase declared over: ask the members that answered for their shares of the seeds
    of those that did not (abandon if some lost member has fewer than the threshold of its
    graph neighbours answering)."""
    roster = roster_of(session, rnd, keys)
    answered = set(store.messages(session, rnd, "unmask"))
    missing = [n for n in roster.names if n not in answered]
    lost = server.unrecoverable(roster, answered, missing)
    if lost:
        finish(session, rnd, RoundStatus.ABANDONED,
               f"{len(lost)} members lost after masking ({', '.join(lost[:5])}) have fewer "
               f"than the threshold {roster.body.threshold} of their graph neighbours answering")
        return
    rnd.request = server.build_recover(roster, missing, keys.private_key()).model_dump_json()
    rnd.status = RoundStatus.RECOVER
