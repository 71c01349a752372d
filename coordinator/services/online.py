"""Streaming mode: store and charge a noisy gradient release, take the SGD step, serve weights.

Releases follow the study's public schedule (docs/ONLINE.md): one per participant and
schedule window, sent after the window has ended, claiming exactly one window's charge. A
release for a window that has not ended, for a window at or before the participant's last
release, or with another claim is refused before anything is stored or charged.

One transaction per release, in this order: the conditional charge on the participant row
(``services.charge.CHARGE``: active and within both caps, the participant lock), the study's
online model row (the study lock), the config check under it, the insert, and, once
``step_releases`` releases are pending, :func:`common.online.learner.federated_step` on
their summed noisy sums and counts (pure post-processing of released values). A replay of an
idempotency key answers the stored release; a different body under the same key is refused.

Centring (the config's ``centre_window``): a release of that window is a noisy sum of the
window's slots' records, not of gradients. It is charged like any window (the per-window
charge is conservative for it: nothing of the window is queried) and added to the model's
centre instead of a step; the centre served is the sum of the centring releases divided by
``window_slots`` times their number (public), bias coordinate 0: post-processing of released
values. Steps are taken relative to a centre, so the centre is fixed at the first step.
Gradient releases of windows before the centring window are refused (422): learning starts
after it.

**A late centring release** (one arriving after the first step, issue 25 item 7) is stored
and **charged**, but not added to the centre (``applied_in`` records the model version it
arrived at). Its noisy body has reached the coordinator, so the privacy it costs is spent
whatever the coordinator does with it, and the participant charged the window before it drew
the noise: the coordinator's ledger records what it observed, and both ledgers agree. A
participant does not send one: it checks the served model before it reserves the centring
window (``participant.online.engine``). (Before, the coordinator answered 409 and charged nothing,
so the two ledgers disagreed by one window.)

**Poisoning bounds** (issue 25 item 3): before anything is stored or charged, the noisy sum's
l2 norm is checked against the largest an honest release can have
(:func:`common.online.bounds.check_online_release`: count x ``radius_x`` plus the Gaussian
norm tail at 2^-40), 422 naming the bound. No stored or served vector is ever non-finite:
a step that would still leave the float range (only possible with extreme public radii or
step sizes) is skipped - the weights keep their last good value, the pending releases are
marked consumed without a step (their charge stays: they were received) and a warning names
the reason - and a centring release that would make the centre non-finite is refused (422,
rolled back). Either way the next release goes through.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from common.budget import PrivacyBudget
from common.config import StudyConfig
from common.errors import (
    ConfigVersionConflict,
    Conflict,
    IdempotencyConflict,
    InvalidInput,
    ModelNotFinite,
    NotFound,
)
from common.online.bounds import check_online_release
from common.online.learner import centre_from_release, federated_step, running_mean
from common.online.params import OnlineParams
from common.online.wire import (
    CENTRE_FIXED,
    OnlineGradientCreate,
    OnlineModelPublic,
    decode_vector,
    encode_vector,
)
from coordinator.db.online import OnlineModel, OnlineRelease, new_model
from coordinator.db.tables import Participant, Study, utcnow
from coordinator.ledger import charge
from coordinator.ledger.checks import check_config, over_budget
from coordinator.services.studies import study_config

log = logging.getLogger("fedod.online")

CLOCK_SKEW = 300
"""Seconds a participant's clock may run ahead of the coordinator's."""


@dataclass(frozen=True)
class Outcome:
    release: OnlineRelease
    model_version: int
    replay: bool


def online_params(study: Study) -> tuple[StudyConfig, OnlineParams]:
    """The study's config and its online section (404 when the study has none)."""
    config = study_config(study)
    if config.online is None:
        raise NotFound(f"study {study.id!r} has no online section: it does not stream")
    return config, config.online


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


def _step(session: Session, model: OnlineModel, params: OnlineParams) -> None:
    pending = list(session.scalars(select(OnlineRelease).where(
        OnlineRelease.study_id == model.study_id, OnlineRelease.applied_in.is_(None),
        OnlineRelease.centring.is_(False)).order_by(OnlineRelease.id)))
    model.pending, model.updated_at = 0, utcnow()
    counted = [r for r in pending if r.count > 0]
    if counted:  # releases of count 0 (no slot queried) carry noise only: no step on them
        _apply(model, params, counted)
    for r in pending:
        r.applied_in = model.version


def _stored(text: str, dim: int) -> NDArray[np.float64]:
    """A stored model vector (weights, average, centre sum); zeros for one made non-finite
    before the poisoning bounds (issue 25 item 3), so such a study learns again from the start
    instead of failing."""
    try:
        return decode_vector(text, dim)
    except ValueError:
        log.warning("a stored online model vector is not finite: served and used as zeros")
        return np.zeros(dim)


def _apply(model: OnlineModel, params: OnlineParams, releases: list[OnlineRelease]) -> None:
    """One SGD step on ``releases``; skipped (weights unchanged, a warning) if it would hold a
    non-finite value, so a study is never blocked by one step."""
    w = _stored(model.weights, params.dim)
    sums = [decode_vector(r.noisy_sum, params.dim) for r in releases]
    try:
        w = federated_step(w, model.version + 1, sums, [r.count for r in releases],
                           params.learner())
    except ModelNotFinite as exc:
        log.warning("study %s: online step %d skipped, releases %s consumed without a step: %s",
                    model.study_id, model.version + 1, [r.id for r in releases], exc)
        return
    model.version += 1
    average = running_mean(_stored(model.average, params.dim), w, model.version)
    model.weights, model.average = encode_vector(w), encode_vector(average)


def _add_centre(session: Session, model: OnlineModel, params: OnlineParams,
                body: OnlineGradientCreate) -> bool:
    """Sum a centring release into the model's centre; False (not added: it is stored and
    charged all the same, see the module) once a step was taken. A sum that would make the
    centre non-finite is refused (the session is rolled back first: nothing stored or
    charged)."""
    if model.version > 0:
        log.info("study %s: window %d's centring release arrived after step %d (%s): "
                 "charged, not added", model.study_id, body.window, model.version,
                 CENTRE_FIXED)
        return False
    noisy = decode_vector(body.noisy_sum, params.dim)
    with np.errstate(over="ignore"):
        if model.centre_sum is not None:
            noisy = noisy + _stored(model.centre_sum, params.dim)
        try:
            centre_from_release(noisy, params.window_slots * (model.centre_releases + 1))
        except ModelNotFinite as exc:
            session.rollback()
            raise ModelNotFinite(f"window {body.window}'s centring release would make the "
                                 f"centre non-finite ({exc}); nothing was stored or "
                                 "charged") from exc
    model.centre_sum, model.centre_releases = encode_vector(noisy), model.centre_releases + 1
    model.updated_at = utcnow()
    return True


def centre_of(model: OnlineModel, params: OnlineParams) -> NDArray[np.float64] | None:
    """The centre served: the centring releases' summed noisy sums over their public number
    of slots, bias coordinate 0 (:func:`common.online.learner.centre_from_release`)."""
    if model.centre_sum is None or not model.centre_releases:
        return None
    return centre_from_release(_stored(model.centre_sum, params.dim),
                               params.window_slots * model.centre_releases)


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
    ids = {"pid": participant.id, "sid": study.id}
    try:
        conn = session.connection()
        if conn.execute(charge.CHARGE, {"eps": eps, "delta": delta, **ids}).first() is None:
            session.rollback()
            raise over_budget(session.get(Participant, participant.id, populate_existing=True)
                               or participant, cost) or InvalidInput("participant revoked")
        model = session.get(OnlineModel, study.id, with_for_update=True, populate_existing=True)
        if model is None:
            model = new_model(study.id, params)
            session.add(model)
        check_config(study.id, *conn.execute(charge.CONFIG, {"sid": study.id}).one(), body)  # type: ignore[arg-type]
        centring = params.is_centre(body.window)
        late = centring and not _add_centre(session, model, params, body)
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
            charge.itemise(conn, participant_id=participant.id, study_id=study.id,
                           key=f"online:{release.id}", digest=digest,
                           config_version=body.config_version, eps_units=eps,
                           delta_units=delta, payload="", kind="online")
        if not centring and model.pending >= params.step_releases:
            _step(session, model, params)
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


def model_public(session: Session, study: Study) -> OnlineModelPublic:
    """The current weights (all zero before the first step)."""
    config, params = online_params(study)
    model = session.get(OnlineModel, study.id) or new_model(study.id, params)
    centre = centre_of(model, params)
    return OnlineModelPublic(study_id=study.id, config_version=config.version,
                             version=model.version or 0, pending=model.pending or 0,
                             weights=encode_vector(_stored(model.weights, params.dim)),
                             average=encode_vector(_stored(model.average, params.dim)),
                             centre=None if centre is None else encode_vector(centre),
                             centre_releases=model.centre_releases or 0)
