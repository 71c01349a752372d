"""The contribution transaction on PostgreSQL: the work of ``services.charge`` in 2 round trips.

``services.charge`` runs five statements (charge, bump, config, insert, ledger); SQLite runs
them in-process, but on PostgreSQL each is a network round trip. Here they are two
data-modifying CTEs, split where the locks require it:

1. ``LOCK``: the conditional charge of the participant row (active, within both caps) and,
   only if it matched, the study's counter ``UPDATE aggregates SET version = version + 1``.
   The charge runs first (the bump's ``EXISTS`` on it is a one-time filter), so the locks are
   taken in the same order as ``services.charge``: participant, then the study's counter row
   (the lock a config re-sign takes too). A bump that waited for that lock re-reads the row
   (PostgreSQL's update recheck), so the version is exact under any number of workers.
2. ``STORE``: one statement whose snapshot starts after both locks are held, hence sees every
   earlier release of this participant (they committed before releasing the participant
   lock) and the config current under the counter lock: the participant's latest release
   (``replaces_id``), the contribution and ledger inserts, the contributor count (+1 for a
   first release), and the study's current config version and digest, which the caller
   checks before committing (a stale config rolls the whole transaction back).

Statement 2 could not join statement 1: all parts of one statement share the snapshot taken
when it starts, before it waited for any lock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Executable, bindparam, text

from coordinator.db.tables import UTCDateTime, utcnow
from coordinator.ledger.charge import Release, Stored
from coordinator.services import driver_sql

_CHARGE = """WITH charge AS (
    UPDATE participants
    SET eps_spent = eps_spent + :eps, delta_spent = delta_spent + :delta
    WHERE id = :pid AND active IS true
      AND eps_spent <= eps_cap - :eps AND delta_spent <= delta_cap - :delta
    RETURNING id
)"""
"""The conditional charge both statements start with: no row when the cap is passed."""

LOCK = text(
    _CHARGE
    + """, bump AS (
    UPDATE aggregates SET version = version + 1, updated_at = :now
    WHERE study_id = :sid AND EXISTS (SELECT 1 FROM charge)
    RETURNING version
)
SELECT version FROM bump
"""
).bindparams(bindparam("now", type_=UTCDateTime()))

STORE = text(
    """
WITH latest AS (
    SELECT max(id) AS id FROM contributions
    WHERE participant_id = :pid AND study_id = :sid AND model_version > 0
), stored AS (
    INSERT INTO contributions (study_id, participant_id, replaces_id, idempotency_key,
        request_sha256, config_version, eps_units, delta_units, lsh_payload, grid_payload,
        model_version, created_at)
    SELECT :sid, :pid, latest.id, :key, :sha, :version, :eps, :delta, :lsh, :grid,
        :model_version, :now
    FROM latest
    RETURNING id
), ledger AS (
    INSERT INTO ledger_entries (participant_id, contribution_id, study_id, kind, eps_units,
        delta_units, created_at)
    SELECT :pid, stored.id, :sid, :kind, :eps, :delta, :now FROM stored
), counted AS (
    UPDATE aggregates SET contributors = contributors + 1
    WHERE study_id = :sid AND (SELECT id FROM latest) IS NULL
)
SELECT stored.id, studies.config_version, studies.config_digest
FROM stored, studies WHERE studies.id = :sid
"""
).bindparams(bindparam("now", type_=UTCDateTime()))


def store(conn: Connection, release: Release, check: Callable[[int, str], None]) -> Stored | None:
    """``services.charge.store`` in two statements; same contract (None: charge refused)."""
    r = release
    now = utcnow()
    params = _params(r, now)
    locked = driver_sql.fetch(conn, LOCK, params)
    if not locked:
        return None
    version = locked[0][0]
    [(contribution_id, config_version, config_digest)] = driver_sql.fetch(
        conn, STORE, {**params, "model_version": version}
    )
    check(config_version, config_digest)
    return r.stored(contribution_id, now, version)


LOCK_ALL = (
    text("SELECT id FROM participants WHERE id = ANY(:pids) ORDER BY id FOR UPDATE"),
    text("SELECT study_id FROM aggregates WHERE study_id = ANY(:sids) ORDER BY study_id "
         "FOR UPDATE"),
)

STORE_LOCKED = text(
    _CHARGE
    + """, latest AS (
    SELECT max(id) AS id FROM contributions
    WHERE participant_id = :pid AND study_id = :sid AND model_version > 0
), bump AS (
    UPDATE aggregates SET version = version + 1, updated_at = :now,
        contributors = contributors + CASE WHEN (SELECT id FROM latest) IS NULL THEN 1 ELSE 0 END
    WHERE study_id = :sid AND EXISTS (SELECT 1 FROM charge)
    RETURNING version
), stored AS (
    INSERT INTO contributions (study_id, participant_id, replaces_id, idempotency_key,
        request_sha256, config_version, eps_units, delta_units, lsh_payload, grid_payload,
        model_version, created_at)
    SELECT :sid, :pid, latest.id, :key, :sha, :version, :eps, :delta, :lsh, :grid,
        bump.version, :now
    FROM latest, bump
    RETURNING id, model_version
), ledger AS (
    INSERT INTO ledger_entries (participant_id, contribution_id, study_id, kind, eps_units,
        delta_units, created_at)
    SELECT :pid, stored.id, :sid, :kind, :eps, :delta, :now FROM stored
)
SELECT stored.id, stored.model_version, studies.config_version, studies.config_digest
FROM stored, studies WHERE studies.id = :sid
"""
).bindparams(bindparam("now", type_=UTCDateTime()))


def store_many(
    conn: Connection, releases: list[Release], checks: list[Callable[[int, str], None]]
) -> list[Stored | None]:
    """Store ``releases`` in the open transaction in one round trip (psycopg's pipeline).

    First every participant row, then every study counter row of the batch is locked, in
    id order (``LOCK_ALL``: one global order, so two batches cannot deadlock, and a single
    :func:`store` takes participant then study too). Then one statement per release (charge,
    bump, latest release, inserts, config) - one statement suffices here because every lock it
    needs is already held, so its snapshot, taken after those locks, sees every release and
    config committed before. Releases run in the given order, each seeing the earlier ones'
    effects. None for a release whose charge was refused (nothing of it was written);
    ``checks[i]`` raises when release ``i``'s config is stale (the caller rolls back).
    """
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


def _params(r: Release, now: object) -> dict[str, object]:
    return {"pid": r.participant_id, "sid": r.study_id, "now": now, "key": r.idempotency_key,
            "sha": r.request_sha256, "version": r.config_version, "eps": r.eps_units,
            "delta": r.delta_units, "lsh": r.lsh_payload, "grid": r.grid_payload,
            "kind": "lsh" if r.grid_payload is None else "lsh+grid"}
