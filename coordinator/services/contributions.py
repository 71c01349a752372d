"""Contributions: validate everything, then store + charge + merge in one transaction.

Locking: the participant row, then the study's aggregate row (``SELECT ... FOR UPDATE`` on
PostgreSQL; SQLite runs every transaction as ``BEGIN IMMEDIATE``, a single writer). Holding the
participant lock makes the idempotency and budget checks exact; holding the aggregate lock
makes the read-modify-write of the global sums exact, with any number of workers.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from common.budget import PrivacyBudget
from common.config import StudyConfig
from common.encoding import EncodedCounts, decode_counts
from common.errors import (
    BudgetExceeded,
    ConfigVersionConflict,
    FedodError,
    IdempotencyConflict,
    InvalidInput,
    PayloadInvalid,
    SchemaMismatch,
)
from common.schemas import ContributionCreate
from coordinator.models import Aggregate, Contribution, LedgerEntry, Participant, Study
from coordinator.services.aggregate import Decoded, add_release
from coordinator.services.studies import study_config

log = logging.getLogger("fedod.contributions")


class ParticipantRevoked(FedodError):
    """The credential was revoked while the request was in flight."""

    status_code = 401


@dataclass(frozen=True)
class Outcome:
    contribution: Contribution
    replay: bool


def request_digest(body: ContributionCreate) -> str:
    """What "the same bytes" means for a retry: the canonical JSON of the request."""
    return hashlib.sha256(body.model_dump_json().encode()).hexdigest()


def _previous(session: Session, participant: Participant, key: str) -> Contribution | None:
    return session.scalar(
        select(Contribution).where(
            Contribution.participant_id == participant.id, Contribution.idempotency_key == key
        )
    )


def _replay(previous: Contribution, digest: str) -> Outcome:
    if not hmac.compare_digest(previous.request_sha256, digest):
        raise IdempotencyConflict(
            f"idempotency key already used (contribution {previous.id}) for a different "
            "payload; a retry must resend exactly the same release",
            contribution=previous.id,
        )
    return Outcome(previous, replay=True)


def _check_config(study: Study, body: ContributionCreate) -> None:
    if body.config_version != study.config_version:
        raise ConfigVersionConflict(
            f"config version {body.config_version} is not the current version "
            f"{study.config_version} of study {study.id!r}; fetch the config again",
            current=study.config_version,
        )
    if not hmac.compare_digest(body.config_digest, study.config_digest):
        raise ConfigVersionConflict(
            f"config digest does not match version {study.config_version} of study "
            f"{study.id!r}; fetch the config again and verify its signature"
        )


def _check_cost(config: StudyConfig, body: ContributionCreate) -> PrivacyBudget:
    try:
        claimed = PrivacyBudget(body.epsilon, body.delta)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"invalid epsilon/delta: {exc}") from exc
    cost = config.release_cost()
    if claimed != cost:
        raise InvalidInput(
            f"claimed cost {claimed} differs from the cost {cost} the study config "
            "prescribes for one release"
        )
    return cost


def _decode(enc: EncodedCounts, n_cells: int, layout: str, what: str, max_bytes: int) -> Decoded:
    if enc.layout != layout:
        raise SchemaMismatch(f"{what} counts must be {layout}, got {enc.layout}")
    try:
        return decode_counts(enc, expected_cells=n_cells, max_bytes=max_bytes)
    except PayloadInvalid as exc:
        exc.message = f"{what} counts: {exc.message}"
        raise


def decode_release(
    config: StudyConfig, body: ContributionCreate, max_bytes: int
) -> tuple[Decoded, Decoded | None]:
    """Decode and check both vectors against the config's shapes and ranges."""
    lsh = _decode(body.lsh, config.lsh_cells, "dense", "lsh", max_bytes)
    if config.grid is None:
        if body.grid is not None:
            raise SchemaMismatch("this study has no grid; send grid=null")
        return lsh, None
    if body.grid is None:
        raise SchemaMismatch("this study releases a grid too; the grid counts are missing")
    grid = _decode(body.grid, config.grid_cells, config.grid_layout or "dense", "grid", max_bytes)
    return lsh, grid


def submit(
    session: Session,
    participant: Participant,
    study: Study,
    body: ContributionCreate,
    *,
    max_decoded_bytes: int,
) -> Outcome:
    """Validate a release fully, then store, charge and merge it atomically."""
    digest = request_digest(body)
    previous = _previous(session, participant, body.idempotency_key)
    if previous is not None:
        return _replay(previous, digest)
    _check_config(study, body)
    config = study_config(study)
    if config.aggregation_mode == "secure":
        raise ConfigVersionConflict(
            f"study {study.id!r} uses secure aggregation: releases go through its rounds "
            "(fedod-participant round), not single contributions"
        )
    cost = _check_cost(config, body)
    session.commit()  # end the read transaction before the slow decoding
    lsh, grid = decode_release(config, body, max_decoded_bytes)
    try:
        return _store(session, participant.id, study.id, body, digest, config, cost, lsh, grid)
    except IntegrityError:
        session.rollback()
        previous = _previous(session, participant, body.idempotency_key)
        if previous is None:
            raise
        return _replay(previous, digest)


def _store(
    session: Session,
    participant_id: int,
    study_id: str,
    body: ContributionCreate,
    digest: str,
    config: StudyConfig,
    cost: PrivacyBudget,
    lsh: Decoded,
    grid: Decoded | None,
) -> Outcome:
    participant = session.scalar(
        select(Participant)
        .where(Participant.id == participant_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    assert participant is not None
    if not participant.active:
        raise ParticipantRevoked(f"participant {participant.name!r} was revoked")
    previous = _previous(session, participant, body.idempotency_key)
    if previous is not None:
        session.rollback()
        return _replay(previous, digest)
    if not (participant.spent + cost).fits_within(participant.cap):
        spent, cap = participant.spent, participant.cap
        session.rollback()
        raise BudgetExceeded(spent=spent, asked=cost, cap=cap, participant=participant.name)
    aggregate = session.scalar(
        select(Aggregate)
        .where(Aggregate.study_id == study_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    study = session.get(Study, study_id, populate_existing=True)
    assert aggregate is not None and study is not None
    _check_config(study, body)
    add_release(aggregate, config, lsh[1], grid)
    aggregate.version += 1
    aggregate.contributors += 1
    eps, delta = cost.to_units()
    contribution = Contribution(
        study_id=study_id,
        participant_id=participant.id,
        idempotency_key=body.idempotency_key,
        request_sha256=digest,
        config_version=body.config_version,
        eps_units=eps,
        delta_units=delta,
        lsh_payload=body.lsh.model_dump_json(),
        grid_payload=body.grid.model_dump_json() if body.grid is not None else None,
        model_version=aggregate.version,
    )
    session.add(contribution)
    session.flush()
    session.add(
        LedgerEntry(
            participant_id=participant.id,
            contribution_id=contribution.id,
            study_id=study_id,
            kind="lsh+grid" if grid is not None else "lsh",
            eps_units=eps,
            delta_units=delta,
        )
    )
    participant.eps_spent += eps
    participant.delta_spent += delta
    session.commit()
    log.info(
        "contribution stored",
        extra={"study": study_id, "participant": participant.name, "id": contribution.id},
    )
    return Outcome(contribution, replay=False)
