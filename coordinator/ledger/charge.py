"""The one ledger writer: every charge of a participant and every ledger row is written here.

Two kinds of release are charged, each in the caller's open transaction (the caller commits
or rolls back), through the conditional :data:`CHARGE` of the participant row (active and
within both caps; no row when refused, and nothing else is written). Its row lock orders a
participant's charges: no other release of theirs runs until commit.

- An LSH contribution (:func:`store`, :func:`store_many`): charge, bump the study's model
  counter (``BUMP``: version + 1, contributors + 1 for a first release; the study lock a config
  re-sign takes too), read the config current under that lock (``CONFIG``, checked by the
  caller's ``check``), insert the contribution (``replaces_id`` = ``LATEST``, the
  participant's previous release) and its ledger entry. On SQLite the five statements run
  in-process on the driver cursor (``coordinator.db.driver_sql``); on PostgreSQL, where each
  is a network round trip, in two (:data:`LOCK`, :data:`STORE`), or a batch in one pipeline
  (:data:`LOCK_ALL`, :data:`STORE_LOCKED`).
- Any other release (:func:`charge_item`, or :func:`take` then :func:`itemise` when the row
  can only be named after the charge): a contribution row at
  ``coordinator.db.tables.OUTSIDE_MODEL`` (never folded, never replacing) and its ledger entry,
  so ``/v1/me``, ``/v1/admin/budget`` and the dashboard list it.

On PostgreSQL the statements are split where the locks require it: ``LOCK`` charges and, only
if that matched, bumps the counter (locks taken participant then study, as on SQLite; a bump
that waited re-reads the row, so the version is exact under any number of workers).
``STORE`` is one statement whose snapshot starts after both locks are held, hence sees every
earlier release of this participant and the config current under the counter lock; it could
not join ``LOCK``, since all parts of one statement share the snapshot taken when it starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Executable, bindparam, case, func, insert, select, text, update

from coordinator.db import driver_sql
from coordinator.db.tables import (
    OUTSIDE_MODEL,
    Aggregate,
    Contribution,
    LedgerEntry,
    Participant,
    Study,
    UTCDateTime,
    lsh_releases,
    utcnow,
)
from coordinator.ledger.releases import Item, PendingRelease, Stored

Check = Callable[[int, str], None]
"""``check(config_version, config_digest)``: raises when the release's config is stale."""

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
    & lsh_releases()
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

_CHARGE_SQL = """WITH charge AS (
    UPDATE participants
    SET eps_spent = eps_spent + :eps, delta_spent = delta_spent + :delta
    WHERE id = :pid AND active IS true
      AND eps_spent <= eps_cap - :eps AND delta_spent <= delta_cap - :delta
    RETURNING id
)"""
_LATEST_SQL = f"""latest AS (
    SELECT max(id) AS id FROM contributions
    WHERE participant_id = :pid AND study_id = :sid AND model_version > {OUTSIDE_MODEL}
)"""
_STORED_SQL = """stored AS (
    INSERT INTO contributions (study_id, participant_id, replaces_id, idempotency_key,
        request_sha256, config_version, eps_units, delta_units, lsh_payload, grid_payload,
        model_version, created_at)
    SELECT :sid, :pid, latest.id, :key, :sha, :version, :eps, :delta, :lsh, :grid,
        %s, :now
    FROM %s
    RETURNING %s
), ledger AS (
    INSERT INTO ledger_entries (participant_id, contribution_id, study_id, kind, eps_units,
        delta_units, created_at)
    SELECT :pid, stored.id, :sid, :kind, :eps, :delta, :now FROM stored
)"""


def _pg(sql: str) -> Executable:
    return text(sql).bindparams(bindparam("now", type_=UTCDateTime()))


LOCK = _pg(_CHARGE_SQL + """, bump AS (
    UPDATE aggregates SET version = version + 1, updated_at = :now
    WHERE study_id = :sid AND EXISTS (SELECT 1 FROM charge)
    RETURNING version
)
SELECT version FROM bump""")
"""PostgreSQL, round trip 1: the conditional charge and, only if it matched, the bump."""

STORE = _pg("WITH " + _LATEST_SQL + ", "
            + _STORED_SQL % (":model_version", "latest", "id") + """, counted AS (
    UPDATE aggregates SET contributors = contributors + 1
    WHERE study_id = :sid AND (SELECT id FROM latest) IS NULL
)
SELECT stored.id, studies.config_version, studies.config_digest
FROM stored, studies WHERE studies.id = :sid""")
"""PostgreSQL, round trip 2: latest release, both inserts, contributor count, config."""

LOCK_ALL = (
    text("SELECT id FROM participants WHERE id = ANY(:pids) ORDER BY id FOR UPDATE"),
    text("SELECT study_id FROM aggregates WHERE study_id = ANY(:sids) ORDER BY study_id "
         "FOR UPDATE"),
)
STORE_LOCKED = _pg(_CHARGE_SQL + ", " + _LATEST_SQL + """, bump AS (
    UPDATE aggregates SET version = version + 1, updated_at = :now,
        contributors = contributors + CASE WHEN (SELECT id FROM latest) IS NULL THEN 1 ELSE 0 END
    WHERE study_id = :sid AND EXISTS (SELECT 1 FROM charge)
    RETURNING version
), """ + _STORED_SQL % ("bump.version", "latest, bump", "id, model_version") + """
SELECT stored.id, stored.model_version, studies.config_version, studies.config_digest
FROM stored, studies WHERE studies.id = :sid""")
"""PostgreSQL, one statement per release of a batch whose locks :data:`LOCK_ALL` holds."""


def store(conn: Connection, release: PendingRelease, check: Check) -> Stored | None:
    """Charge and store ``release`` in the open transaction; None if the charge was refused."""
    if conn.dialect.name == "postgresql":
        return _store_pg(conn, release, check)
    r = release
    ids = {"pid": r.participant_id, "sid": r.study_id}
    if not driver_sql.fetch(conn, CHARGE, {"eps": r.eps_units, "delta": r.delta_units, **ids}):
        return None
    now = utcnow()
    ((version,),) = driver_sql.fetch(conn, BUMP, {**ids, "now": now})
    (config,) = driver_sql.fetch(conn, CONFIG, {"sid": r.study_id})
    check(*config)
    row = {**r.__dict__, **ids, "model_version": version, "created_at": now}
    ((contribution_id,),) = driver_sql.fetch(conn, INSERT_CONTRIBUTION, row)
    _ledger(conn, contribution_id, row, r.kind)
    return r.stored(contribution_id, now, version)


def _store_pg(conn: Connection, release: PendingRelease, check: Check) -> Stored | None:
    now = utcnow()
    params = _params(release, now)
    locked = driver_sql.fetch(conn, LOCK, params)
    if not locked:
        return None
    version = locked[0][0]
    [(contribution_id, config_version, config_digest)] = driver_sql.fetch(
        conn, STORE, {**params, "model_version": version}
    )
    check(config_version, config_digest)
    return release.stored(contribution_id, now, version)


def store_many(
    conn: Connection, releases: list[PendingRelease], checks: list[Check]
) -> list[Stored | None]:
    """:func:`store` of each release in order, each seeing the earlier ones' effects.

    On PostgreSQL in one round trip (psycopg's pipeline): first every participant row, then
    every study counter row of the batch is locked, in id order (:data:`LOCK_ALL`: one global
    order, so two batches cannot deadlock, and a single :func:`store` takes participant then
    study too); then one :data:`STORE_LOCKED` per release, whose snapshot, taken after those
    locks, sees every release and config committed before. None for a release whose charge was
    refused (nothing of it was written); ``checks[i]`` raises when release ``i``'s config is
    stale (the caller rolls back).
    """
    if conn.dialect.name != "postgresql":
        return [store(conn, r, check) for r, check in zip(releases, checks, strict=True)]
    now = utcnow()
    locks: list[dict[str, Any]] = [{"pids": sorted({r.participant_id for r in releases})},
                                   {"sids": sorted({r.study_id for r in releases})}]
    rows = [_params(r, now) for r in releases]
    lock_steps: list[tuple[Executable, dict[str, Any]]] = list(zip(LOCK_ALL, locks, strict=True))
    results = driver_sql.pipeline(conn, lock_steps, STORE_LOCKED, rows)
    out: list[Stored | None] = []
    for r, check, found in zip(releases, checks, results, strict=True):
        if not found:
            out.append(None)
            continue
        [(contribution_id, version, config_version, config_digest)] = found
        check(config_version, config_digest)
        out.append(r.stored(contribution_id, now, version))
    return out


def take(conn: Connection, participant_id: int, eps_units: int, delta_units: int) -> bool:
    """The conditional :data:`CHARGE` alone (the participant row lock); False if refused."""
    params = {"pid": participant_id, "eps": eps_units, "delta": delta_units}
    return bool(driver_sql.fetch(conn, CHARGE, params))


def itemise(conn: Connection, item: Item) -> int:
    """Itemise a charge :func:`take` already took for ``item``: a contribution row at
    ``OUTSIDE_MODEL`` (outside every fold window, so never merged into or replacing the LSH
    model) and its ledger entry. Returns the contribution id."""
    eps, delta = item.cost.to_units()
    row = {
        "study_id": item.study_id, "participant_id": item.participant_id, "replaces_id": None,
        "idempotency_key": item.key, "request_sha256": item.digest,
        "config_version": item.config_version, "eps_units": eps, "delta_units": delta,
        "lsh_payload": item.payload, "grid_payload": None, "model_version": OUTSIDE_MODEL,
        "created_at": utcnow()}
    ((contribution_id,),) = driver_sql.fetch(conn, INSERT_ITEM, row)
    _ledger(conn, contribution_id, row, item.kind)
    return int(contribution_id)


def charge_item(conn: Connection, item: Item) -> int | None:
    """:func:`take` then :func:`itemise`: the contribution id, or None if refused."""
    eps, delta = item.cost.to_units()
    if not take(conn, item.participant_id, eps, delta):
        return None
    return itemise(conn, item)


def _ledger(conn: Connection, contribution_id: int, row: dict[str, Any], kind: str) -> None:
    """The ledger entry of a just-inserted contribution ``row`` (same ids, charge and time)."""
    keys = ("participant_id", "study_id", "eps_units", "delta_units", "created_at")
    entry = {k: row[k] for k in keys}
    driver_sql.fetch(conn, INSERT_LEDGER, {**entry, "contribution_id": contribution_id,
                                           "kind": kind})


def _params(r: PendingRelease, now: object) -> dict[str, object]:
    return {"pid": r.participant_id, "sid": r.study_id, "now": now, "key": r.idempotency_key,
            "sha": r.request_sha256, "version": r.config_version, "eps": r.eps_units,
            "delta": r.delta_units, "lsh": r.lsh_payload, "grid": r.grid_payload,
            "kind": r.kind}
