"""Streaming mode: check, charge and store a noisy gradient release (the model it feeds is
:mod:`coordinator.services.online_model`).

Releases follow the study's public schedule (docs/ONLINE.md): one per participant and
schedule window, sent after the window has ended, claiming exactly one window's charge. A
release for a window that has not ended, for a window at or before the participant's last
release, or with another claim is refused before anything is stored or charged. Gradient
releases of windows before the centring window are refused (422): learning starts after it.
A centring release is charged like any window (the per-window charge is conservative for it:
nothing of the window is queried).

One transaction per release, in this order: the conditional charge on the participant row
(the ledger writer's :func:`coordinator.ledger.charge.take`: active and within both caps, the
participant lock), the study's online model row (the study lock), the config check under it,
the insert, its ledger entry, and, once ``step_releases`` releases are pending, the step
(:func:`coordinator.services.online_model.step`). A replay of an idempotency key answers the
stored release; a different body under the same key is refused.

**A late centring release** (one arriving after the first step) is stored and **charged**, but
not added to the centre (``applied_in`` records the model version it arrived at). Its noisy
body has reached the coordinator, so the privacy it costs is spent whatever the coordinator
does with it, and the participant charged the window before it drew the noise: the
coordinator's ledger records what it observed, and both ledgers agree. A participant does not
send one: it checks the served model before it reserves the centring window
(``participant.online.engine``).

**Poisoning bounds**: before anything is stored or charged, the noisy sum's l2 norm is checked
against the largest an honest release can have
(:func:`common.online.bounds.check_online_release`: count x ``radius_x`` plus the Gaussian
norm tail at 2^-40), 422 naming the bound.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from common.budget import PrivacyBudget
from common.errors import ConfigVersionConflict, Conflict, IdempotencyConflict, InvalidInput
from common.online.bounds import check_online_release
from common.online.params import OnlineParams
from common.online.wire import OnlineGradientCreate, decode_vector
from coordinator.db.online import OnlineModel, OnlineRelease, new_model
from coordinator.db.tables import Participant, Study
from coordinator.ledger import charge
from coordinator.ledger.checks import check_config, over_budget
from coordinator.ledger.releases import Item
from coordinator.services.online_model import add_centre, online_params, step

CLOCK_SKEW = 300
"""Seconds a participant's clock may run ahead of the coordinator's."""


@dataclass(frozen=True)
class Outcome:
    release: OnlineRelease
    model_version: int
    replay: bool


def _digest(body: OnlineGradientCreate) -> str:
    return hashlib.sha256(body.model_dump_json().encode()).hexdigest()


def _previous(session: Session, participant_id: int, study_id: str, key: str
              ) -> OnlineRelease | None:
    return session.scalar(select(OnlineRelease).where(
        OnlineRelease.participant_id == participant_id, OnlineRelease.study_id == study_id,
        OnlineRelease.idempotency_key == key))


def _replay(previous: OnlineRelease, digest: str, session: Session) -> Outcome:
    if not hmac.compare_digest(previous.request_sha256, digest):
        raise IdempotencyConflict(
            f"idempotency key already used (online release {previous.id}) for a different "
            "payload; a retry must resend exactly the same release", release=previous.id)
    model = session.get(OnlineModel, previous.study_id)
    return Outcome(previous, model.version if model else 0, replay=True)


def _check_cost(params: OnlineParams, body: OnlineGradientCreate) -> PrivacyBudget:
    claimed = PrivacyBudget(body.epsilon, body.delta)
    if claimed != (expected := params.epoch_cost()):
        raise InvalidInput(f"claimed cost {claimed} differs from the one window's charge "
                           f"{expected} that the study config's schedule prescribes")
    return claimed


def _check_window(session: Session, participant: Participant, study: Study,
                  params: OnlineParams, body: OnlineGradientCreate, now: float) -> None:
    """One release per window, in window order, only once the window has ended; its count
    of queried slots cannot exceed the window's slots."""
    if body.count > params.window_slots:
        raise InvalidInput(f"count {body.count} exceeds the {params.window_slots} slots of a "
                           "schedule window")
    if params.is_centre(body.window) and body.count != params.window_slots:
        raise InvalidInput(f"window {body.window} is the centring window: its release sums "
                           f"all {params.window_slots} slots (count {params.window_slots}), "
                           f"not {body.count}")
    if params.before_centre(body.window):
        raise InvalidInput(f"window {body.window} comes before the centring window "
                           f"{params.centre_window}: learning starts after it, nothing of "
                           "earlier windows is released")
    if params.window_end(body.window) > now + CLOCK_SKEW:
        raise InvalidInput(f"window {body.window} of the schedule has not ended (it ends at "
                           f"Unix time {params.window_end(body.window)}); a window's release "
                           "is sent after its end")
    last = session.scalar(select(func.max(OnlineRelease.schedule_window)).where(
        OnlineRelease.participant_id == participant.id, OnlineRelease.study_id == study.id))
    if last is not None and body.window <= last:
        raise Conflict(f"window {body.window} is not after this participant's last released "
                       f"window {last}: one release per window, in order", last_window=last)


def submit(session: Session, participant: Participant, study: Study,
           body: OnlineGradientCreate, clock: Callable[[], float] = time.time) -> Outcome:
    """Validate, charge, store, and step when enough releases are pending."""
    digest = _digest(body)
    previous = _previous(session, participant.id, study.id, body.idempotency_key)
    if previous is not None:
        return _replay(previous, digest, session)
    config, params = online_params(study)
    check_config(study.id, study.config_version, study.config_digest, body)  # type: ignore[arg-type]
    try:
        noisy_sum = decode_vector(body.noisy_sum, params.dim)
    except ValueError as exc:
        raise InvalidInput(f"noisy_sum: {exc}") from exc
    cost = _check_cost(params, body)
    _check_window(session, participant, study, params, body, clock())
    check_online_release(params, noisy_sum, body.count, centring=params.is_centre(body.window))
    if (refusal := over_budget(participant, cost)) is not None:
        raise refusal
    eps, delta = cost.to_units()
    try:
        conn = session.connection()
        if not charge.take(conn, participant.id, eps, delta):
            session.rollback()
            raise over_budget(session.get(Participant, participant.id, populate_existing=True)
                               or participant, cost) or InvalidInput("participant revoked")
        model = session.get(OnlineModel, study.id, with_for_update=True, populate_existing=True)
        if model is None:
            model = new_model(study.id, params)
            session.add(model)
        check_config(study.id, *conn.execute(charge.CONFIG, {"sid": study.id}).one(), body)  # type: ignore[arg-type]
        centring = params.is_centre(body.window)
        late = centring and not add_centre(session, model, params, body)
        release = OnlineRelease(
            study_id=study.id, participant_id=participant.id,
            idempotency_key=body.idempotency_key, request_sha256=digest,
            config_version=body.config_version, weights_version=body.weights_version,
            schedule_window=body.window, count=body.count, noisy_sum=body.noisy_sum,
            eps_units=eps, delta_units=delta, centring=centring,
            applied_in=model.version if late else None)
        session.add(release)
        model.pending += 0 if centring else 1
        session.flush()
        if eps or delta:  # itemised on the ledger like every other charge
            charge.itemise(conn, Item(participant.id, study.id, f"online:{release.id}", digest,
                                      body.config_version, cost, "", "online"))
        if not centring and model.pending >= params.step_releases:
            step(session, model, params)
        version = model.version
        session.commit()
    except IntegrityError:
        session.rollback()
        previous = _previous(session, participant.id, study.id, body.idempotency_key)
        if previous is None:  # another worker stored this window's release first
            raise Conflict(f"window {body.window} already has a release from this "
                           "participant: one release per window") from None
        return _replay(previous, digest, session)
    except ConfigVersionConflict:
        session.rollback()
        raise
    return Outcome(release, version, replay=False)


