"""Contributions: validate everything, then store + charge + count in one transaction.

Order of work, cheapest refusal first: idempotent replay (keys scoped per participant and
study, read with the caller in one query, ``services.ingest_lookup``), config version and
digest, claimed cost, budget (all before the body is decoded), then decoding, the digest
of the counts and the poisoning bounds (:func:`check_release`,
:mod:`common.histograms.release_bounds`; the one place both the ORM and the group-commit path run,
:func:`prepare`), then a short write transaction (the ledger writer, ``coordinator.ledger.charge``:
its locks make budget, replacement and config checks exact under any number of workers) - for the
route, the batch of its process's group commit (``services.group_commit``), which falls back
to :func:`store_one` and :func:`refuse_charge` per release. The sums are not touched here:
they are folded from the stored contributions when the model is read
(``services.aggregate.fold``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from common.budget import PrivacyBudget
from common.errors import (
    ConfigVersionConflict,
    IdempotencyConflict,
    InvalidInput,
    PayloadInvalid,
    SchemaMismatch,
)
from common.histograms.release_bounds import check_grid, check_lsh, release_bounds
from common.study.config import StudyConfig
from common.wire.encoding import EncodedCounts, validated_json
from common.wire.schemas import ContributionCreate
from coordinator.db.tables import Contribution, Participant
from coordinator.ledger import charge
from coordinator.ledger.checks import ParticipantRevoked, check_config, over_budget
from coordinator.ledger.releases import PendingRelease, Stored, previous
from coordinator.services.aggregate import decode_vector
from coordinator.services.ingest_lookup import IngestCaller
from coordinator.services.studies import parse_config

log = logging.getLogger("fedod.contributions")


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


def _replay(session: Session, previous: int, previous_sha256: str, digest: str) -> Outcome:
    if not hmac.compare_digest(previous_sha256, digest):
        raise IdempotencyConflict(
            f"idempotency key already used (contribution {previous}) for a different "
            "payload; a retry must resend exactly the same release",
            contribution=previous,
        )
    row = session.get(Contribution, previous)
    assert row is not None, "a stored contribution is never deleted"
    stored = Stored(row.id, row.study_id, row.config_version, row.eps_units, row.delta_units,
                    row.created_at, row.model_version)  # plain values: outlive the session
    return Outcome(stored, replay=True)


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


def _decode(enc: EncodedCounts, n_cells: int, layout: str, what: str, max_bytes: int
            ) -> NDArray[np.int64]:
    if enc.layout != layout:
        raise SchemaMismatch(f"{what} counts must be {layout}, got {enc.layout}")
    try:
        return decode_vector(enc, n_cells, max_bytes)[1]
    except PayloadInvalid as exc:
        exc.message = f"{what} counts: {exc.message}"
        raise


def check_release(config: StudyConfig, body: ContributionCreate, max_bytes: int) -> None:
    """Decode and check both vectors against the config's shapes and ranges, then against the
    poisoning bounds of :mod:`common.histograms.release_bounds` (cells within the record bound plus
    the noise tail, LSH tables' and a dense grid's totals consistent), 422 naming the bound.
    Nothing is kept: the model's fold decodes the stored release again."""
    lsh = _decode(body.lsh, config.lsh_cells, "dense", "lsh", max_bytes)
    if config.grid is None:
        if body.grid is not None:
            raise SchemaMismatch("this study has no grid; send grid=null")
        check_lsh(release_bounds(config), lsh)
        return
    if body.grid is None:
        raise SchemaMismatch("this study releases a grid too; the grid counts are missing")
    grid = _decode(body.grid, config.grid_cells, config.grid_layout or "dense", "grid",
                   max_bytes)
    bounds = release_bounds(config)
    check_grid(bounds, grid)
    check_lsh(bounds, lsh, grid)


@dataclass(frozen=True)
class Prepared:
    """A release validated and decoded, ready for the write transaction."""

    release: PendingRelease
    cost: PrivacyBudget
    body: ContributionCreate

    def check(self, version: int, config_digest: str) -> None:
        """Raise when the config current under the study lock is not the release's."""
        check_config(self.release.study_id, version, config_digest, self.body)


def prepare(
    session: Session, caller: IngestCaller, body: ContributionCreate, *, max_decoded_bytes: int
) -> Outcome | Prepared:
    """Validate a release fully (budget before decoding): a replay's outcome, or what to store.

    ``caller`` is the route's one read (``services.ingest_lookup``), done in the session's
    open transaction; on SQLite that transaction is ended before decoding (the group writer
    reads in a snapshot that holds no lock, ``db.READ``; a transaction opened by a replay's
    read holds the write lock), on PostgreSQL it goes on into the write (no lock is held yet,
    and each statement reads a fresh snapshot at READ COMMITTED). The write is :func:`store_one`,
    or one batch of the process's group commit (``services.group_commit``).
    """
    assert caller.study_id is not None
    digest = request_digest(body)
    if caller.previous_id:
        return _replay(session, caller.previous_id, caller.previous_sha256, digest)
    check_config(caller.study_id, caller.config_version, caller.config_digest, body)
    config = parse_config(caller.config_payload)
    if config.aggregation_mode == "secure":
        raise ConfigVersionConflict(
            f"study {caller.study_id!r} uses secure aggregation: releases go through its "
            "rounds (fedod-participant round), not single contributions"
        )
    cost = _check_cost(config, body)
    refusal = over_budget(caller, cost)
    if refusal is not None:
        raise refusal
    if session.get_bind().dialect.name != "postgresql":
        session.rollback()  # end the read transaction (and its lock, if it took the write lock)
    check_release(config, body, max_decoded_bytes)
    release = PendingRelease(
        caller.participant_id,
        caller.study_id,
        body.idempotency_key,
        digest,
        body.config_version,
        *cost.to_units(),
        validated_json(body.lsh),
        validated_json(body.grid) if body.grid is not None else None,
    )
    return Prepared(release, cost, body)


def store_one(session: Session, prepared: Prepared) -> Outcome:
    """Store and charge one prepared release in its own transaction (commits)."""
    release = prepared.release
    try:
        stored = charge.store(session.connection(), release, prepared.check)
        if stored is None:
            return refuse_charge(session, prepared)
        session.commit()
    except IntegrityError:
        session.rollback()
        found, sha = previous(
            session.connection(), release.participant_id, release.study_id,
            release.idempotency_key,
        )
        if not found:
            raise
        return _replay(session, found, sha, release.request_sha256)
    return Outcome(stored, replay=False)


def refuse_charge(session: Session, prepared: Prepared) -> Outcome:
    """Why the conditional charge matched no row: a replay that won the race, revoked, or over."""
    release = prepared.release
    session.rollback()
    participant = session.get(Participant, release.participant_id, populate_existing=True)
    key = release.idempotency_key
    found, sha = previous(session.connection(), release.participant_id, release.study_id,
                                 key)
    if found:
        outcome = _replay(session, found, sha, release.request_sha256)
        session.commit()
        return outcome
    session.commit()  # nothing was written; the loaded rows stay readable
    assert participant is not None
    if not participant.active:
        raise ParticipantRevoked(f"participant {participant.name!r} was revoked")
    raise over_budget(participant, prepared.cost) or RuntimeError("the charge matched no row")
