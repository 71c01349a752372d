"""The contribution transaction: charge, order, store, itemise - as prebuilt Core statements.

Built once at import and run on the driver cursor beneath the session's connection
(``services.driver_sql``: compiled once, no per-execute SQLAlchemy work), in this order:

1. ``CHARGE``: a conditional ``UPDATE participants`` (active, within both caps) - the
   participant row lock: no other release of this participant runs until commit, so every
   later statement's snapshot holds all of its earlier releases (``LATEST`` is exact);
2. ``BUMP``: ``UPDATE aggregates`` (version + 1, contributors + 1 when ``LATEST``, the
   participant's previous release for the study, is none) - the study's counter row lock,
   the lock a config re-sign takes too;
3. ``CONFIG``: the study's current config version and digest, read under that lock;
4. ``INSERT`` the contribution (``replaces_id`` = ``LATEST``) and its ledger entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, case, func, insert, select, update

from coordinator.db.tables import Aggregate, Contribution, LedgerEntry, Participant, Study, utcnow
from coordinator.services.driver_sql import fetch

PREVIOUS = select(Contribution.id, Contribution.request_sha256).where(
    Contribution.participant_id == bindparam("pid"),
    Contribution.study_id == bindparam("sid"),
    Contribution.idempotency_key == bindparam("key"),
)
CHARGE = (
    update(Participant)
    .where(
        Participant.id == bindparam("pid"),
        Participant.active.is_(True),
        Participant.eps_spent <= Participant.eps_cap - bindparam("eps"),
        Participant.delta_spent <= Participant.delta_cap - bindparam("delta"),
    )
    .values(
        eps_spent=Participant.eps_spent + bindparam("eps"),
        delta_spent=Participant.delta_spent + bindparam("delta"),
    )
    .returning(Participant.id)
)
_MINE = (
    (Contribution.participant_id == bindparam("pid"))
    & (Contribution.study_id == bindparam("sid"))
    & (Contribution.model_version > 0)  # cohort-round releases (version 0) replace nothing
)
LATEST = select(func.max(Contribution.id)).where(_MINE).scalar_subquery()
BUMP = (
    update(Aggregate)
    .where(Aggregate.study_id == bindparam("sid"))
    .values(
        version=Aggregate.version + 1,
        contributors=Aggregate.contributors + case((LATEST.is_(None), 1), else_=0),
        updated_at=bindparam("now"),
    )
    .returning(Aggregate.version)
)
CONFIG = select(Study.config_version, Study.config_digest).where(Study.id == bindparam("sid"))
INSERT_CONTRIBUTION = insert(Contribution).values(replaces_id=LATEST).returning(Contribution.id)
INSERT_LEDGER = insert(LedgerEntry)
INSERT_ITEM = insert(Contribution).returning(Contribution.id)  # replaces nothing: see itemise


@dataclass(frozen=True)
class Stored:
    """What the response needs of a just-inserted contribution."""

    id: int
    study_id: str
    config_version: int
    eps_units: int
    delta_units: int
    created_at: datetime
    model_version: int


@dataclass(frozen=True)
class Release:
    """One validated release, ready to store (payloads as they arrived, encoded)."""

    participant_id: int
    study_id: str
    idempotency_key: str
    request_sha256: str
    config_version: int
    eps_units: int
    delta_units: int
    lsh_payload: str
    grid_payload: str | None

    def stored(self, contribution_id: int, created_at: datetime, model_version: int) -> Stored:
        """What the response needs once this release is the contribution ``contribution_id``."""
        return Stored(contribution_id, self.study_id, self.config_version, self.eps_units,
                      self.delta_units, created_at, model_version)


def previous(conn: Connection, participant_id: int, study_id: str, key: str) -> tuple[int, str]:
    """``(id, request digest)`` of the release stored under this key, or ``(0, "")``."""
    row = conn.execute(PREVIOUS, {"pid": participant_id, "sid": study_id, "key": key}).first()
    return (row[0], row[1]) if row is not None else (0, "")


def store(conn: Connection, release: Release, check: Callable[[int, str], None]) -> Stored | None:
    """Charge and store ``release`` in the open transaction; None if the charge was refused.

    ``check(config_version, config_digest)`` is called under the study lock and raises when
    the release's config is no longer current. The caller commits (or rolls back).
    """
    r = release
    ids = {"pid": r.participant_id, "sid": r.study_id}
    if not fetch(conn, CHARGE, {"eps": r.eps_units, "delta": r.delta_units, **ids}):
        return None
    now = utcnow()
    ((version,),) = fetch(conn, BUMP, {**ids, "now": now})
    (config,) = fetch(conn, CONFIG, {"sid": r.study_id})
    check(*config)
    row = {**r.__dict__, **ids, "model_version": version, "created_at": now}
    ((contribution_id,),) = fetch(conn, INSERT_CONTRIBUTION, row)
    _ledger(conn, contribution_id, row, "lsh" if r.grid_payload is None else "lsh+grid")
    return r.stored(contribution_id, now, version)


def itemise(conn: Connection, *, participant_id: int, study_id: str, key: str, digest: str,
            config_version: int, eps_units: int, delta_units: int, payload: str,
            kind: str) -> int:
    """Itemise a charge that :data:`CHARGE` already took for a release that is not an LSH
    contribution (a cohort round, a streaming gradient): a contribution row with
    ``model_version`` 0 (outside every fold window, so never merged into or replacing the LSH
    model) and its ledger entry, so ``/v1/me``, ``/v1/admin/budget`` and the dashboard list
    it. Returns the contribution id."""
    row = {
        "study_id": study_id, "participant_id": participant_id, "replaces_id": None,
        "idempotency_key": key, "request_sha256": digest, "config_version": config_version,
        "eps_units": eps_units, "delta_units": delta_units, "lsh_payload": payload,
        "grid_payload": None, "model_version": 0, "created_at": utcnow()}
    ((contribution_id,),) = fetch(conn, INSERT_ITEM, row)
    _ledger(conn, contribution_id, row, kind)
    return int(contribution_id)


def _ledger(conn: Connection, contribution_id: int, row: dict[str, Any], kind: str) -> None:
    """The ledger entry of a just-inserted contribution ``row`` (same ids, charge and time)."""
    keys = ("participant_id", "study_id", "eps_units", "delta_units", "created_at")
    entry = {k: row[k] for k in keys}
    fetch(conn, INSERT_LEDGER, {**entry, "contribution_id": contribution_id, "kind": kind})
