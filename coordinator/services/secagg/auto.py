"""Rounds the signed config opens by itself: ``aggregation.open_rounds = "when_ready"``.

A secure study normally waits for its administrator to open each round
(``fedod-coordinator rounds open STUDY`` or ``POST /v1/studies/{id}/rounds``). A study whose
signed config says ``"open_rounds": "when_ready"`` has its first round opened by the
coordinator as soon as the cohort is ready: a membership certificate is uploaded and every
member it certifies is an active study member that registered its certified identity key.
The check runs when a member asks for the current round (``GET .../rounds/current``), so a
cohort of unattended hospitals (``fedod-participant run``, docker-compose) finishes without a
hand-made request.

Only round 1 opens by itself: every later round charges every member again, so it stays the
administrator's decision (``rounds open``). The rule reads only what the coordinator already
holds (the signed config, the certificate, who registered a key), never anything a member's
data decides, and it is in the signed config, so members see it before they take part.
"""

from __future__ import annotations

import logging

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from common.errors import Conflict
from coordinator.db.secagg import Round
from coordinator.db.tables import Member, Study
from coordinator.services.secagg import rounds, store
from coordinator.services.studies import study_config

__all__ = ["WHEN_READY", "open_if_ready", "readiness"]

log = logging.getLogger("fedod.secagg")
WHEN_READY = "when_ready"


def readiness(session: Session, study: Study) -> tuple[int, int] | None:
    """``(ready, certified)`` members of a ``when_ready`` study that has no round yet, else
    ``None`` (another rule, a round already opened, or no certificate uploaded)."""
    if session.scalar(select(Round.id).where(Round.study_id == study.id).limit(1)) is not None:
        return None
    params = study_config(study).aggregation
    if params is None or params.mode != "secure" or params.open_rounds != WHEN_READY:
        return None
    signed = store.membership(session, study.id)
    if signed is None:
        return None
    ids = list(session.scalars(select(Member.participant_id).where(Member.study_id == study.id)))
    try:
        ready = store.certified_cohort(session, study.id, ids)
    except Conflict:  # a member registered another key: the admin must look at it
        return None
    return len(ready), len(signed.body().members)


def open_if_ready(session: Session, study: Study) -> Round | None:
    """Open round 1 of a ``when_ready`` study once every certified member is ready; ``None``
    when nothing was opened. Safe under concurrent callers: the round's unique key lets one
    insert win, the others find it open."""
    state = readiness(session, study)
    if state is None or state[0] < state[1]:
        return None
    session.commit()  # end the caller's read snapshot: the open below is a write transaction
    try:
        rnd = rounds.open_round(session, study)
    except (Conflict, IntegrityError):
        session.rollback()
        return None
    log.info("round opened by the config's open_rounds=when_ready",
             extra={"study": study.id, "round": rnd.number})
    return rnd
