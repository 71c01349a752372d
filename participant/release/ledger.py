"""The participant's own privacy ledger: a sqlite3 file in the state directory.

Every release is recorded *before* any record is read or any noise is drawn, and the local cap
is checked in the same transaction, so no coordinator config can make the participant
overspend. A release moves through these states::

    intended ──► stored ──► acknowledged      (coordinator answered 200/201)
        │  │        └─────► rejected          (coordinator refused it with a final 4xx)
        │  └─► kept                           (held locally by the protocol that sends it)
        └─► abandoned                         (agent died, or failed, before the body was stored)

``stored`` and ``acknowledged`` belong to an independent release, whose body waits in the
outbox until the coordinator answers. ``kept`` is a release whose sending this ledger does not
follow: a secure round's noisy vector (``participant.secagg``), a cohort round's
(``participant.cohorts``), a stream window's charge (``participant.online``); their own files
keep and re-send them. Ledgers written before ``kept`` existed marked those ``acknowledged``
with no contribution id; they read as ``kept`` (:data:`_READ_STATUS`).

**Every state counts as spent, ``abandoned`` included.** A release is reserved just before the
data is read, so any release in the ledger may have read the data; refunding one that failed
would let a coordinator learn from data-dependent failures for free (a crash that depends on
where a record falls turns "was a POST sent?" into a free query; docs/TRUST.md). A release is
never refunded once reserved; only checks that do not read the data (config, caps, schema,
column names) may refuse without a charge, and they run before the reservation.

The ledger also keeps the newest signed-config version seen for each study, so an older
(replayed) config is refused even after a restart.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from common.budget import PrivacyBudget
from common.errors import BudgetExceeded

STATUSES = ("intended", "stored", "kept", "acknowledged", "rejected", "abandoned")

_READ_STATUS = ("CASE WHEN status='acknowledged' AND contribution_id IS NULL THEN 'kept' "
                "ELSE status END")
"""A status as read: only the coordinator's answer sets a contribution id, so an
``acknowledged`` row without one was a locally kept release (written before ``kept``)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS releases (
    idempotency_key TEXT PRIMARY KEY,
    study TEXT NOT NULL,
    config_version INTEGER NOT NULL,
    config_digest TEXT NOT NULL,
    eps_nano INTEGER NOT NULL,
    delta_atto INTEGER NOT NULL,
    status TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    contribution_id TEXT,
    detail TEXT
);
CREATE TABLE IF NOT EXISTS config_seen (
    study TEXT PRIMARY KEY,
    newest_version INTEGER NOT NULL
);
"""


@dataclass(frozen=True)
class LedgerEntry:
    """One recorded release."""

    idempotency_key: str
    study: str
    config_version: int
    config_digest: str
    cost: PrivacyBudget
    status: str
    created_at: str
    updated_at: str
    contribution_id: str | None
    detail: str | None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class Ledger:
    """Local ledger; every method is one short transaction."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        new = not self.path.exists()
        self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        if new:
            self.path.chmod(0o600)
        self._db.execute("PRAGMA journal_mode=DELETE")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def spent(self) -> PrivacyBudget:
        """Sum of every release that counts (see module docstring)."""
        eps, delta = self._db.execute(
            "SELECT COALESCE(SUM(eps_nano),0), COALESCE(SUM(delta_atto),0) FROM releases"
        ).fetchone()
        return PrivacyBudget.from_units(int(eps), int(delta))

    def check(self, cost: PrivacyBudget, cap: PrivacyBudget) -> None:
        """Raise BudgetExceeded if ``cost`` would take spending past ``cap``."""
        spent = self.spent()
        if not (spent + cost).fits_within(cap):
            raise BudgetExceeded(
                f"privacy budget exceeded (local cap): already spent {spent}, this release "
                f"asks {cost}, the local cap is {cap}; nothing was released and no noise was "
                f"drawn. The local cap is set at enrolment (--epsilon-cap/--delta-cap) and no "
                f"coordinator config can raise it.",
                spent=spent, asked=cost, cap=cap, source="local ledger",
            )

    def reserve(
        self,
        *,
        idempotency_key: str,
        study: str,
        config_version: int,
        config_digest: str,
        cost: PrivacyBudget,
        cap: PrivacyBudget,
    ) -> None:
        """Check the cap and record an ``intended`` release, atomically."""
        eps, delta = cost.to_units()
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self.check(cost, cap)
            now = _now()
            self._db.execute(
                "INSERT INTO releases VALUES (?,?,?,?,?,?,'intended',?,?,NULL,NULL)",
                (idempotency_key, study, config_version, config_digest, eps, delta, now, now),
            )
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def mark(
        self,
        idempotency_key: str,
        status: str,
        *,
        contribution_id: str | None = None,
        detail: str | None = None,
    ) -> None:
        """Move a release to ``status`` (stored/kept/acknowledged/rejected/abandoned)."""
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        self._db.execute(
            "UPDATE releases SET status=?, updated_at=?, "
            "contribution_id=COALESCE(?, contribution_id), detail=COALESCE(?, detail) "
            "WHERE idempotency_key=?",
            (status, _now(), contribution_id, detail, idempotency_key),
        )

    def entries(self, *, study: str | None = None, status: str | None = None,
                key: str | None = None) -> list[LedgerEntry]:
        sql = ("SELECT idempotency_key, study, config_version, config_digest, eps_nano, "
               f"delta_atto, {_READ_STATUS}, created_at, updated_at, contribution_id, detail "
               "FROM releases WHERE 1=1")
        args: list[str] = []
        for column, value in (("study", study), (_READ_STATUS, status),
                              ("idempotency_key", key)):
            if value is not None:
                sql += f" AND {column}=?"
                args.append(value)
        rows = self._db.execute(sql + " ORDER BY created_at, rowid", args).fetchall()
        return [
            LedgerEntry(
                idempotency_key=r[0],
                study=r[1],
                config_version=r[2],
                config_digest=r[3],
                cost=PrivacyBudget.from_units(r[4], r[5]),
                status=r[6],
                created_at=r[7],
                updated_at=r[8],
                contribution_id=r[9],
                detail=r[10],
            )
            for r in rows
        ]

    def entry(self, key: str) -> LedgerEntry | None:
        """The release recorded under ``key``, if any."""
        found = self.entries(key=key)
        return found[0] if found else None

    def newest_seen(self, study: str) -> int | None:
        row = self._db.execute(
            "SELECT newest_version FROM config_seen WHERE study=?", (study,)
        ).fetchone()
        return None if row is None else int(row[0])

    def see_config(self, study: str, version: int) -> None:
        """Remember ``version`` as seen (never lowers the stored value)."""
        self._db.execute(
            "INSERT INTO config_seen VALUES (?, ?) ON CONFLICT(study) DO UPDATE SET "
            "newest_version = MAX(newest_version, excluded.newest_version)",
            (study, version),
        )
