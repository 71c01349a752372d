"""Contributions: validate everything, then store + charge + count in one transaction.

Order of work, cheapest refusal first: idempotent replay (one indexed lookup), config version
and digest, claimed cost, budget (all before the body is decoded), then decoding and the
digest of the counts, then one short write transaction.

Locking (PostgreSQL, READ COMMITTED; SQLite runs every transaction as ``BEGIN IMMEDIATE``, a
single writer): the conditional ``UPDATE participants`` that charges the release takes the
participant row lock first, which makes the budget check and the "latest release of this
participant for this study" lookup exact; then ``UPDATE aggregates`` bumps the study's model
version (the counter row lock orders the releases of a study, the same lock a config re-sign
takes, so the config check after it is exact). The sums are not touched here: they are folded
from the stored contributions when the model is read (``services.aggregate.fold``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from common.budget import PrivacyBudget
from common.config import StudyConfig
from common.encoding import EncodedCounts
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
from coordinator.models import Aggregate, Contribution, LedgerEntry, Participant, Study, utcnow
from coordinator.services.aggregate import Decoded, decode_vector
from coordinator.services.studies import study_config

log = logging.getLogger("fedod.contributions")


class ParticipantRevoked(FedodError):
    """The credential was revoked while the request was in flight."""

    status_code = 401


@dataclass(frozen=True)
class Stored:
    """What the response needs of a contribution (a stored row, or a just-inserted one)."""

    id: int
    study_id: str
    config_version: int
    eps_units: int
    delta_units: int
    created_at: datetime
    model_version: int


@dataclass(frozen=True)
class Who:
    """The contributing participant, captured before the session lets its row expire."""

    id: int
    name: str


@dataclass(frozen=True)
class Outcome:
    contribution: Stored | Contribution
    replay: bool


def request_digest(body: ContributionCreate) -> str:
    """What "the same release" means for a retry: the canonical JSON without the count data.

    The counts are represented by their SHA-256 (of the decompressed bytes, checked when the
    release is decoded), so a retry is recognised without re-serialising and hashing the
    whole body; two releases with different counts always differ here.
    """
    exclude = {"lsh": {"data"}, "grid": {"data"}}
    return hashlib.sha256(body.model_dump_json(exclude=exclude).encode()).hexdigest()


def _previous(
    session: Session, participant_id: int, study_id: str, key: str
) -> Contribution | None:
    return session.scalar(
        select(Contribution).where(
            Contribution.participant_id == participant_id,
            Contribution.study_id == study_id,
            Contribution.idempotency_key == key,
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


def _check_config(study_id: str, version: int, digest: str, body: ContributionCreate) -> None:
    if body.config_version != version:
        raise ConfigVersionConflict(
            f"config version {body.config_version} is not the current version "
            f"{version} of study {study_id!r}; fetch the config again",
            current=version,
        )
    if not hmac.compare_digest(body.config_digest, digest):
        raise ConfigVersionConflict(
            f"config digest does not match version {version} of study "
            f"{study_id!r}; fetch the config again and verify its signature"
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


def _over_budget(participant: Participant, cost: PrivacyBudget) -> BudgetExceeded | None:
    """The refusal when ``cost`` does not fit (a sum past the exact range never fits)."""
    spent, cap = participant.spent, participant.cap
    try:
        fits = (spent + cost).fits_within(cap)
    except ValueError:  # spent + cost is past what the ledger can hold exactly
        fits = False
    if fits:
        return None
    return BudgetExceeded(spent=spent, asked=cost, cap=cap, participant=participant.name)


def _decode(enc: EncodedCounts, n_cells: int, layout: str, what: str, max_bytes: int) -> Decoded:
    if enc.layout != layout:
        raise SchemaMismatch(f"{what} counts must be {layout}, got {enc.layout}")
    try:
        return decode_vector(enc, n_cells, max_bytes)
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
    """Validate a release fully (budget before decoding), then store and charge it atomically."""
    digest = request_digest(body)
    previous = _previous(session, participant.id, study.id, body.idempotency_key)
    if previous is not None:
        return _replay(previous, digest)
    _check_config(study.id, study.config_version, study.config_digest, body)
    config = study_config(study)
    cost = _check_cost(config, body)
    refusal = _over_budget(participant, cost)
    if refusal is not None:
        raise refusal
    who = Who(participant.id, participant.name)
    session.rollback()  # end the read transaction (SQLite: the write lock) before decoding
    _, grid = decode_release(config, body, max_decoded_bytes)
    try:
        return _store(session, who, study.id, body, digest, cost, grid is not None)
    except IntegrityError:
        session.rollback()
        previous = _previous(session, participant.id, study.id, body.idempotency_key)
        if previous is None:
            raise
        return _replay(previous, digest)


def _refuse_charge(
    session: Session,
    participant_id: int,
    study_id: str,
    body: ContributionCreate,
    digest: str,
    cost: PrivacyBudget,
) -> Outcome:
    """Why the conditional charge matched no row: a replay that won the race, revoked, or over."""
    participant = session.get(Participant, participant_id, populate_existing=True)
    previous = _previous(session, participant_id, study_id, body.idempotency_key)
    session.commit()  # nothing was written; the loaded rows stay readable
    if previous is not None:
        return _replay(previous, digest)
    assert participant is not None
    if not participant.active:
        raise ParticipantRevoked(f"participant {participant.name!r} was revoked")
    raise _over_budget(participant, cost) or RuntimeError("the charge matched no row")


def _store(
    session: Session,
    participant: Who,
    study_id: str,
    body: ContributionCreate,
    digest: str,
    cost: PrivacyBudget,
    has_grid: bool,
) -> Outcome:
    eps, delta = cost.to_units()
    charged = session.execute(
        update(Participant)
        .where(
            Participant.id == participant.id,
            Participant.active.is_(True),
            Participant.eps_spent <= Participant.eps_cap - eps,
            Participant.delta_spent <= Participant.delta_cap - delta,
        )
        .values(eps_spent=Participant.eps_spent + eps, delta_spent=Participant.delta_spent + delta)
        .returning(Participant.id)
        .execution_options(synchronize_session=False)
    ).first()
    if charged is None:
        return _refuse_charge(session, participant.id, study_id, body, digest, cost)
    replaces = session.scalar(
        select(func.max(Contribution.id)).where(
            Contribution.participant_id == participant.id, Contribution.study_id == study_id
        )
    )
    model_version = session.execute(
        update(Aggregate)
        .where(Aggregate.study_id == study_id)
        .values(
            version=Aggregate.version + 1,
            contributors=Aggregate.contributors + (1 if replaces is None else 0),
            updated_at=utcnow(),
        )
        .returning(Aggregate.version)
        .execution_options(synchronize_session=False)
    ).scalar_one()
    current = session.execute(
        select(Study.config_version, Study.config_digest).where(Study.id == study_id)
    ).one()
    try:
        _check_config(study_id, current.config_version, current.config_digest, body)
    except ConfigVersionConflict:
        session.rollback()
        raise
    now = utcnow()
    contribution_id = session.execute(
        insert(Contribution)
        .values(
            study_id=study_id,
            participant_id=participant.id,
            replaces_id=replaces,
            idempotency_key=body.idempotency_key,
            request_sha256=digest,
            config_version=body.config_version,
            eps_units=eps,
            delta_units=delta,
            lsh_payload=body.lsh.model_dump_json(),
            grid_payload=body.grid.model_dump_json() if body.grid is not None else None,
            model_version=model_version,
            created_at=now,
        )
        .returning(Contribution.id)
    ).scalar_one()
    session.execute(
        insert(LedgerEntry).values(
            participant_id=participant.id,
            contribution_id=contribution_id,
            study_id=study_id,
            kind="lsh+grid" if has_grid else "lsh",
            eps_units=eps,
            delta_units=delta,
            created_at=now,
        )
    )
    session.commit()
    log.info(
        "contribution stored",
        extra={"study": study_id, "participant": participant.name, "id": contribution_id},
    )
    stored = Stored(contribution_id, study_id, body.config_version, eps, delta, now, model_version)
    return Outcome(stored, replay=False)
