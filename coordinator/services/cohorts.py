"""Cohort rounds: a thin state machine around :mod:`common.cohorts.protocol`.

    (admin start) ──► round 1 open ──(every expected member sent, or admin close)──► done
    round r done ──► round r + 1 open, waiting for round r's senders ... round T done ──►
    the protocol's ``finish`` stored as the study's released CohortModel

A release is checked (member expected, config version, round inside the public plan, claimed
cost, vector length, every value inside its poisoning bound: :mod:`common.cohorts.bounds`,
422 naming the bound), then charged and stored in one transaction that holds the open round's
row lock: the coordinator's ledger refuses over-cap releases (409) and a retry with the same
key and values is answered from the stored row without a second charge. Rounds never advance
on a clock.

Closing sums the stored releases with an overflow-checked int64 sum. If a closing step still
fails (a release stored before the bounds existed, a sum that could pass int64, a
non-finite model), the round ends ``failed`` with the reason, the state keeps its last good
value and the next round opens from it (:meth:`~common.cohorts.protocol.RoundProtocol.skip`:
a k-means round or DPM level is stepped over); a failed DPM leaf round ends the run
``failed``. No stored state or model is ever non-finite.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from common.budget import PrivacyBudget
from common.cohorts.bounds import release_bounds
from common.cohorts.model import CohortModel
from common.cohorts.params import CohortParams
from common.cohorts.protocol import CohortState, RoundProtocol
from common.cohorts.schemas import CohortReleaseCreate
from common.cohorts.study import protocol_of
from common.errors import (
    BudgetExceeded,
    ConfigVersionConflict,
    Conflict,
    FedodError,
    IdempotencyConflict,
    InvalidInput,
    NotFound,
)
from common.study.config import StudyConfig
from coordinator.db.cohorts import CohortRelease, CohortResult, CohortRound
from coordinator.db.tables import Member, Participant, Study, utcnow
from coordinator.ledger import charge
from coordinator.ledger.refusals import record_refusal
from coordinator.ledger.releases import Item
from coordinator.services.studies import study_config

log = logging.getLogger("fedod.cohorts")


def cohort_setup(study: Study) -> tuple[StudyConfig, CohortParams, RoundProtocol]:
    """The study's config, cohort parameters and protocol; 409 for a study without cohorts."""
    config = study_config(study)
    if config.cohorts is None:
        raise Conflict(f"study {study.id!r} has no cohorts section in its config: no cohort "
                       "rounds (create the study with a 'cohorts' section)")
    return config, config.cohorts, protocol_of(config)


def senders(session: Session, study_id: str, number: int) -> list[str]:
    rows = session.execute(
        select(Participant.name)
        .join(CohortRelease, CohortRelease.participant_id == Participant.id)
        .where(CohortRelease.study_id == study_id, CohortRelease.number == number)
    )
    return sorted(name for (name,) in rows)


def expected(rnd: CohortRound) -> list[str]:
    names: list[str] = json.loads(rnd.expected)
    return names


def start(session: Session, study: Study) -> CohortRound:
    """Admin: open round 1 for the study's active members (once per study)."""
    config, _, protocol = cohort_setup(study)
    if session.get(CohortRound, (study.id, 1)) is not None:
        raise Conflict(f"the cohort rounds of {study.id!r} were already started")
    names = sorted(session.scalars(
        select(Participant.name).join(Member, Member.participant_id == Participant.id)
        .where(Member.study_id == study.id, Participant.active.is_(True))))
    if not names:
        raise Conflict(f"study {study.id!r} has no active members to run cohort rounds with; "
                       "add members first")
    rnd = CohortRound(study_id=study.id, number=1, config_version=config.version, status="open",
                      state=protocol.start().to_json(), expected=json.dumps(names))
    session.add(rnd)
    session.commit()
    log.info("cohort rounds started", extra={"study": study.id, "members": len(names)})
    return rnd


def _open_round(session: Session, study_id: str, number: int) -> CohortRound:
    rnd = session.scalar(
        select(CohortRound)
        .where(CohortRound.study_id == study_id, CohortRound.number == number)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if rnd is None:
        raise NotFound(f"study {study_id!r} has no cohort round {number} (yet)")
    return rnd


def _digest(body: CohortReleaseCreate) -> str:
    return hashlib.sha256(json.dumps(body.values, separators=(",", ":")).encode()).hexdigest()


def _replay(stored: CohortRelease, body: CohortReleaseCreate) -> CohortRelease:
    same = (stored.idempotency_key == body.idempotency_key
            and hmac.compare_digest(stored.payload_sha256, _digest(body)))
    if not same:
        raise IdempotencyConflict(
            f"a different noisy vector (or key) is already stored for this participant in "
            f"round {stored.number}; a retry must re-send exactly the same release")
    return stored


def _check(config: StudyConfig, protocol: RoundProtocol, rnd: CohortRound,
           body: CohortReleaseCreate) -> PrivacyBudget:
    if body.config_version not in (config.version, rnd.config_version):
        # the version the run started under stays valid: a vector drawn under it (stored,
        # not yet sent when the config was re-signed) must still be accepted byte for byte
        raise ConfigVersionConflict(
            f"config version {body.config_version} is not the current version {config.version} "
            f"of study {config.study_id!r}; fetch the config again", current=config.version)
    state = CohortState.from_json(rnd.state)
    try:
        if state.done + 1 != rnd.number:
            raise ValueError(f"its state is for round {state.done + 1}")
        mechanism = protocol.mechanism(state)  # the plan's round: its cost and its bounds
        bounds = release_bounds(mechanism)
    except (KeyError, TypeError, ValueError) as exc:
        raise Conflict(f"cohort round {rnd.number} is not one the signed config allows "
                       f"({exc}); nothing was stored or charged") from exc
    cost = mechanism.cost
    claimed = PrivacyBudget(body.epsilon, body.delta)
    if claimed != cost:
        raise InvalidInput(f"claimed cost {claimed} differs from the cost {cost} the signed "
                           f"config prescribes for cohort round {rnd.number}")
    size = mechanism.size
    if len(body.values) != size:
        raise InvalidInput(f"round {rnd.number} takes a vector of {size} values, got "
                           f"{len(body.values)}")
    bounds.check(body.values, f"the release for cohort round {rnd.number}")
    return cost


def _charge(session: Session, participant: Participant, item: Item) -> int:
    """Charge the coordinator's ledger and keep the release as a contribution row (never
    folded into the LSH model: ``coordinator.db.tables.OUTSIDE_MODEL``)."""
    cid = charge.charge_item(session.connection(), item)
    if cid is None:
        session.refresh(participant)
        raise BudgetExceeded(spent=participant.spent, asked=item.cost, cap=participant.cap,
                             participant=participant.name)
    return cid


def post_release(session: Session, study: Study, participant: Participant, number: int,
                 body: CohortReleaseCreate) -> CohortRound:
    """Check, charge and store one noisy vector; close the round when every expected member
    has sent. One transaction under the round's row lock."""
    config, _, protocol = cohort_setup(study)
    rnd = _open_round(session, study.id, number)
    stored = session.get(CohortRelease, (study.id, number, participant.id))
    if stored is not None:
        _replay(stored, body)
        session.commit()
        return rnd
    if rnd.status != "open":
        raise Conflict(f"cohort round {number} of {study.id!r} is closed")
    if participant.name not in expected(rnd):
        raise Conflict(f"{participant.name!r} is not expected in cohort round {number} "
                       f"(expected: {', '.join(expected(rnd))})")
    cost = _check(config, protocol, rnd, body)
    payload, digest = json.dumps(body.values, separators=(",", ":")), _digest(body)
    try:
        cid = _charge(session, participant, Item(participant.id, study.id, f"cohort:{number}",
                                                 digest, config.version, cost, payload, "cohort"))
    except BudgetExceeded as exc:
        record_refusal(session, participant.id, study.id, cost, exc)
        raise
    session.add(CohortRelease(study_id=study.id, number=number, participant_id=participant.id,
                              idempotency_key=body.idempotency_key, payload_sha256=digest,
                              payload=payload, contribution_id=cid))
    session.flush()
    if senders(session, study.id, number) == sorted(expected(rnd)):
        _close(session, study, protocol, rnd, "every expected participant sent")
    session.commit()
    return rnd


def _close(session: Session, study: Study, protocol: RoundProtocol, rnd: CohortRound,
           detail: str) -> None:
    rows = session.scalars(select(CohortRelease).where(
        CohortRelease.study_id == study.id, CohortRelease.number == rnd.number))
    releases = [json.loads(r.payload) for r in rows]
    before = CohortState.from_json(rnd.state)
    rnd.finished_at = utcnow()
    try:
        state, model = _step(protocol, before, releases)
    except (FedodError, ValueError, ArithmeticError) as exc:
        rnd.status, rnd.detail = "failed", f"{detail}; the round failed and was not used: {exc}"
        log.warning("cohort round failed", extra={"study": study.id, "round": rnd.number,
                                                  "reason": str(exc)})
        try:
            state, model = _skip(protocol, before)
        except (FedodError, ValueError, ArithmeticError) as again:
            rnd.detail += f"; the run cannot go on: {again}"
            return
    else:
        rnd.status, rnd.detail = "done", detail
    if model is not None:
        config = study_config(study)
        assert config.cohorts is not None
        session.add(CohortResult(study_id=study.id, method=config.cohorts.method,
                                 model=model.to_json()))
        log.info("cohort model released", extra={"study": study.id, "k": model.k})
        return
    _open_next(session, study, rnd, state)


def _skip(protocol: RoundProtocol, state: CohortState
          ) -> tuple[CohortState, CohortModel | None]:
    """The state after stepping over a failed round (its last good value) and, if that was
    the last round, the model from it."""
    skipped = protocol.skip(state)
    if skipped is None:
        raise ValueError("this round cannot be stepped over (no model without it)")
    return skipped, protocol.finish(skipped) if protocol.finished(skipped) else None


def _step(protocol: RoundProtocol, state: CohortState, releases: list[list[int]]
          ) -> tuple[CohortState, CohortModel | None]:
    """The next state (checked sum of the releases) and, after the last round, the model;
    raises if either would hold a non-finite value."""
    after = protocol.advance(state, [np.asarray(r, dtype=np.int64) for r in releases])
    after.to_json()  # refuses a NaN or infinite value
    model = protocol.finish(after) if protocol.finished(after) else None  # refuses non-finite
    return after, model


def _open_next(session: Session, study: Study, rnd: CohortRound, state: CohortState) -> None:
    session.add(CohortRound(study_id=study.id, number=rnd.number + 1,
                            config_version=rnd.config_version, status="open",
                            state=state.to_json(),
                            expected=json.dumps(senders(session, study.id, rnd.number))))


def close(session: Session, study: Study, number: int) -> CohortRound:
    """Admin: close an open round with the vectors received so far (at least one)."""
    _, _, protocol = cohort_setup(study)
    rnd = _open_round(session, study.id, number)
    if rnd.status != "open":
        raise Conflict(f"cohort round {number} of {study.id!r} is already closed")
    sent = senders(session, study.id, number)
    if not sent:
        raise Conflict(f"cohort round {number} has no release yet; nothing to close with")
    missing = sorted(set(expected(rnd)) - set(sent))
    _close(session, study, protocol, rnd,
           f"closed by the admin with {len(sent)} of {len(expected(rnd))} "
           f"(missing: {', '.join(missing) or 'none'})")
    session.commit()
    return rnd
