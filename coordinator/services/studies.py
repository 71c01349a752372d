"""Studies: fresh hash seeds, the LSH digest, and the signed config that participants verify."""

from __future__ import annotations

import logging
import secrets
from functools import lru_cache
from typing import Literal

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from common.detectors.rules import grid_rule, study_lsh, study_scoring
from common.errors import Conflict, InvalidInput, NotFound
from common.noise.planning import config_noise_warning, plan_lsh_tables
from common.study.canonical import parse_canonical
from common.study.config import StudyConfig, new_study_config
from common.study.params import GridParams
from common.study.signing import SignedConfig, sign_config
from common.wire.schemas import StudyCreate, StudyPublic
from coordinator.db.online import new_model
from coordinator.db.tables import Aggregate, AggregateSnapshot, Member, Participant, Study, utcnow
from coordinator.keys import KeyStore

log = logging.getLogger("fedod.studies")


@lru_cache(maxsize=256)
def parse_config(payload: str) -> StudyConfig:
    """A stored config payload, parsed once per payload and process."""
    return parse_canonical(StudyConfig, payload)


def study_config(study: Study) -> StudyConfig:
    """The study's current config (parsed once per payload and process)."""
    return parse_config(study.config_payload)


def signed_config(study: Study) -> SignedConfig:
    return SignedConfig(
        payload=study.config_payload, signature=study.config_signature, key_id=study.key_id
    )


def _store_signature(study: Study, config: StudyConfig, keys: KeyStore) -> None:
    signed = sign_config(config, keys.private_key())
    study.config_version = config.version
    study.config_payload = signed.payload
    study.config_signature = signed.signature
    study.key_id = signed.key_id
    study.config_digest = signed.digest()


def create_study(session: Session, keys: KeyStore, body: StudyCreate) -> Study:
    """Derive fresh seeds and the LSH digest, sign version 1, create an empty model."""
    if session.get(Study, body.study_id) is not None:
        raise Conflict(f"study {body.study_id!r} already exists; pick another id")
    n_tables, sample_size = lsh_tables_for(body)
    try:
        config = new_study_config(
            body.study_id,
            body.features,
            privacy=body.privacy,
            n_tables=n_tables,
            sample_size=sample_size,
            grid=grid_for(body),
            valid_days=body.valid_days,
            seed=secrets.token_bytes(32),
            scoring=scoring_for(body, n_tables, sample_size),
            aggregation=body.aggregation,
            online=body.online,
            cohorts=body.cohorts,
        )
    except (ValidationError, ValueError) as exc:
        raise InvalidInput(f"invalid study config: {exc}") from exc
    study = Study(id=body.study_id)
    _store_signature(study, config, keys)
    try:
        session.add(study)
        session.flush()
        session.add(Aggregate(study_id=study.id, version=0, contributors=0))
        session.add(AggregateSnapshot(study_id=study.id, version=0, contributors=0, lsh_sum=b""))
        if config.online is not None:  # streaming mode: all-zero weights, version 0
            session.add(new_model(study.id, config.online))
        session.commit()
    except IntegrityError as exc:  # a concurrent request created the same id first
        session.rollback()
        raise Conflict(f"study {body.study_id!r} already exists; pick another id") from exc
    log.info("study created", extra={"study": study.id, "lsh_cells": config.lsh_cells})
    warning = config_noise_warning(config, getattr(body, "aggregation", None))
    if warning:
        log.warning("study %s: %s", study.id, warning)
    return study


def lsh_tables_for(body: StudyCreate) -> tuple[int, int]:
    """Table count and size: the administrator's where given (fields set in the request),
    else chosen from the declared cohort by the public rule (``common.detectors.rules``);
    without a declared cohort size and expected records, ``common.noise.planning``'s
    defaults."""
    fixed = body.lsh.model_fields_set
    n_tables = body.lsh.n_tables if "n_tables" in fixed else None
    sample_size = body.lsh.sample_size if "sample_size" in fixed else None
    agg = getattr(body, "aggregation", None)
    if agg is None or agg.cohort_size is None or agg.expected_records is None:
        return plan_lsh_tables(n_tables, sample_size)
    return study_lsh(body.privacy.epsilon_lsh, len(body.features), agg.mode, agg.cohort_size,
                     agg.expected_records, agg.h_min if agg.mode == "secure" else 0,
                     n_tables, sample_size)


def scoring_for(body: StudyCreate, n_tables: int, sample_size: int
                ) -> Literal["log", "mass"] | None:
    """The request's LSH scoring, else the public rule's for the chosen tables when the
    cohort is declared (``log`` where the cells stand clear of the noise), else ``None``
    (the detector's default, ``mass``)."""
    scoring = getattr(body.lsh, "scoring", None)
    agg = getattr(body, "aggregation", None)
    if scoring is not None or agg is None or agg.cohort_size is None or (
            agg.expected_records is None):
        return scoring
    return study_scoring(body.privacy.epsilon_lsh, agg.mode, agg.cohort_size,
                         agg.expected_records, n_tables, sample_size,
                         agg.h_min if agg.mode == "secure" else 0)


def grid_for(body: StudyCreate) -> GridParams | None:
    """The requested grid, with ``bins``, ``k`` and ``projection`` the request left unset
    chosen by the public rule (``common.detectors.rules.grid_rule``) when the cohort size
    and expected records are declared; otherwise as requested."""
    grid, agg = body.grid, getattr(body, "aggregation", None)
    if grid is None or agg is None or agg.cohort_size is None or agg.expected_records is None:
        return grid
    unset = {"bins", "k", "projection"} - grid.model_fields_set
    if not unset:
        return grid
    d = len(grid.features) if grid.features is not None else len(body.features)
    rule = grid_rule(d=d, expected_records=agg.expected_records, cohort_size=agg.cohort_size,
                     epsilon=body.privacy.epsilon_grid or None, cell_limit=grid.cell_limit)
    if not rule.use:
        log.warning("study %s: the grid's expected score signal-to-noise ratio is %.3g (below"
                    " 0.1): it adds noise, not signal; consider leaving the grid out and"
                    " spending its epsilon on the LSH tables", body.study_id, rule.snr)
    chosen = {"bins": rule.bins, "k": min(rule.k, 100_000), "projection": rule.projection}
    return grid.model_copy(update={name: chosen[name] for name in unset})


def get_study(session: Session, study_id: str) -> Study:
    study = session.get(Study, study_id)
    if study is None:
        raise NotFound(f"no study {study_id!r}", study=study_id)
    return study


def list_studies(session: Session) -> list[Study]:
    return list(session.scalars(select(Study).order_by(Study.id)))


def study_public(session: Session, study: Study) -> StudyPublic:
    aggregate = session.get(Aggregate, study.id)
    assert aggregate is not None
    return StudyPublic(
        study_id=study.id,
        version=study.config_version,
        contributors=aggregate.contributors,
        model_version=aggregate.version,
        config=signed_config(study),
    )


def add_member(session: Session, study_id: str, participant_name: str) -> None:
    """Let a participant read and contribute to a study (idempotent)."""
    study = get_study(session, study_id)
    participant = session.scalar(select(Participant).where(Participant.name == participant_name))
    if participant is None:
        raise NotFound(f"no participant named {participant_name!r}", participant=participant_name)
    if session.get(Member, (study.id, participant.id)) is None:
        session.add(Member(study_id=study.id, participant_id=participant.id))
    try:
        session.commit()
    except IntegrityError:  # a concurrent request added the same membership: already done
        session.rollback()


def resign_all(session: Session, keys: KeyStore) -> list[tuple[str, int]]:
    """Re-sign every study's config with the current key as version + 1.

    Each study's aggregate row is locked first, the same lock contributions take, so no
    contribution is checked against a version that changes under it.
    """
    done = []
    for study_id in session.scalars(select(Study.id).order_by(Study.id)).all():
        session.scalar(select(Aggregate).where(Aggregate.study_id == study_id).with_for_update())
        study = session.get(Study, study_id, populate_existing=True)
        assert study is not None
        config = study_config(study).model_copy(
            update={
                "version": study.config_version + 1,
                "issued_at": utcnow().replace(microsecond=0),
            }
        )
        _store_signature(study, config, keys)
        done.append((study.id, study.config_version))
    session.commit()
    return done
