"""The online model of a streaming study: the SGD step on pending releases, the centre, and the
weights served. Everything here is post-processing of released values (docs/ONLINE.md);
releases come in through :mod:`coordinator.services.online`.

Centring (the config's ``centre_window``): a release of that window is a noisy sum of the
window's slots' records, not of gradients. It is added to the model's centre instead of a
step; the centre served is the sum of the centring releases divided by ``window_slots`` times
their number (public), bias coordinate 0. Steps are taken relative to a centre, so the
centre is fixed at the first step: a centring release that arrives later is stored and
charged but not added (:func:`add_centre`).

No stored or served vector is ever non-finite: a step that would leave the float range (only
possible with extreme public radii or step sizes) is skipped - the weights keep their last
good value, the pending releases are marked consumed without a step (their charge stays: they
were received) and a warning names the reason - and a centring release that would make the
centre non-finite is refused (422, rolled back). Either way the next release goes through.
"""

from __future__ import annotations

import logging

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import select
from sqlalchemy.orm import Session

from common.errors import ModelNotFinite, NotFound
from common.online.ftrl import ftrl_step
from common.online.learner import centre_from_release, federated_step, running_mean
from common.online.params import OnlineParams
from common.online.wire import (
    CENTRE_FIXED,
    OnlineGradientCreate,
    OnlineModelPublic,
    decode_vector,
    encode_vector,
)
from common.study.config import StudyConfig
from coordinator.db.online import OnlineModel, OnlineRelease, new_model
from coordinator.db.tables import Study, utcnow
from coordinator.services.studies import study_config

log = logging.getLogger("fedod.online")


def online_params(study: Study) -> tuple[StudyConfig, OnlineParams]:
    """The study's config and its online section (404 when the study has none)."""
    config = study_config(study)
    if config.online is None:
        raise NotFound(f"study {study.id!r} has no online section: it does not stream")
    return config, config.online


def step(session: Session, model: OnlineModel, params: OnlineParams) -> None:
    """The SGD step on the study's pending gradient releases (they are consumed either way)."""
    pending = list(session.scalars(select(OnlineRelease).where(
        OnlineRelease.study_id == model.study_id, OnlineRelease.applied_in.is_(None),
        OnlineRelease.centring.is_(False)).order_by(OnlineRelease.id)))
    model.pending, model.updated_at = 0, utcnow()
    if params.algorithm == "ftrl":  # every increment moves the members' prefix sums
        _apply(model, params, pending)
    elif counted := [r for r in pending if r.count > 0]:  # count 0: noise only, no SGD step
        _apply(model, params, counted)
    for r in pending:
        r.applied_in = model.version


def _stored(text: str, dim: int) -> NDArray[np.float64]:
    """A stored model vector (weights, average, centre sum); zeros for one made non-finite
    before the coordinator checked a release's bounds, so such a study learns again from the
    start instead of failing."""
    try:
        return decode_vector(text, dim)
    except ValueError:
        log.warning("a stored online model vector is not finite: served and used as zeros")
        return np.zeros(dim)


def _apply(model: OnlineModel, params: OnlineParams, releases: list[OnlineRelease]) -> None:
    """One step on ``releases`` (FTRL: ``w - eta`` times their summed prefix increments, the
    average served as ``w``; FLMB: one SGD step, the running mean of the iterates); skipped
    (weights unchanged, a warning) if it would hold a non-finite value, so a study is never
    blocked by one step."""
    w = _stored(model.weights, params.dim)
    sums = [decode_vector(r.noisy_sum, params.dim) for r in releases]
    try:
        if params.algorithm == "ftrl":
            w = ftrl_step(w, sums, params.eta)
        else:
            w = federated_step(w, model.version + 1, sums, [r.count for r in releases],
                               params.learner())
    except ModelNotFinite as exc:
        log.warning("study %s: online step %d skipped, releases %s consumed without a step: %s",
                    model.study_id, model.version + 1, [r.id for r in releases], exc)
        return
    model.version += 1
    average = w if params.algorithm == "ftrl" else running_mean(
        _stored(model.average, params.dim), w, model.version)
    model.weights, model.average = encode_vector(w), encode_vector(average)


def add_centre(session: Session, model: OnlineModel, params: OnlineParams,
                body: OnlineGradientCreate) -> bool:
    """Sum a centring release into the model's centre; False (not added: it is stored and
    charged all the same, since its noisy body has reached the coordinator) once a step was
    taken. A sum that would make the centre non-finite is refused (the session is rolled back
    first: nothing stored or charged)."""
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
