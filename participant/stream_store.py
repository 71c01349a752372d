"""The durable cursor of ``fedod-participant stream``: one sqlite3 file per study (0600).

Every state change is one transaction, committed *before* its effect can be observed:

- a record's query decision is stored (with the record, if queried) before its score line is
  written or its label requested (fsync'd first when queried: :meth:`StreamStore.durable`),
  so a restart never re-decides a record (re-spending ``epsilon_select``) and skips records
  already consumed (keyed by record id);
- a label is folded into the pending batch sum in the same transaction that marks it used, so
  a record enters at most one batch;
- a noisy batch sum is stored as the exact request body in the same transaction that empties
  the pending batch, and re-sent byte for byte until acknowledged; noise is drawn only for a
  batch that is not yet stored (a draw lost to a crash before its commit was never seen);
- an epoch's charge is reserved in the participant ledger before its first query decision.

Nothing here leaves the machine except the stored release bodies.
"""

from __future__ import annotations

import base64
import json
import secrets
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from participant.state import FILE_MODE

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    id TEXT PRIMARY KEY, seq INTEGER NOT NULL, queried INTEGER NOT NULL,
    x BLOB, label INTEGER, scores TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS waiting_labels (id TEXT PRIMARY KEY, label INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS releases (
    key TEXT PRIMARY KEY, seq INTEGER NOT NULL, body TEXT NOT NULL, status TEXT NOT NULL
);
"""

Vector = NDArray[np.float64]


def _vec(blob: bytes) -> Vector:
    return np.frombuffer(blob, dtype="<f8").astype(np.float64)


def _blob(v: Vector) -> bytes:
    return np.asarray(v, dtype="<f8").tobytes()


class StreamStore:
    """Typed access to the stream's cursor; each method is one short transaction."""

    def __init__(self, path: Path, dim: int) -> None:
        new = not path.exists()
        self.dim = dim
        self._db = sqlite3.connect(path, isolation_level=None, timeout=30)
        if new:
            path.chmod(FILE_MODE)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # see durable()
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    # --- scalar state -------------------------------------------------------------------
    def get(self, key: str, default: Any = None) -> Any:
        row = self._db.execute("SELECT v FROM meta WHERE k=?", (key,)).fetchone()
        return default if row is None else row[0]

    def _set(self, **values: Any) -> None:
        self._db.executemany("INSERT INTO meta VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET "
                             "v=excluded.v", [(k, str(v)) for k, v in values.items()])

    def stream_id(self) -> str:
        """This stream's random id (names its epoch charges in the ledger), made once."""
        if self.get("stream_id") is None:
            self._set(stream_id=secrets.token_urlsafe(12))
        return str(self.get("stream_id"))

    def num(self, key: str) -> int:
        return int(self.get(key, 0))

    def pending(self) -> tuple[Vector, int]:
        """The open batch's exact gradient sum and labelled count (local only)."""
        raw = self.get("pending_sum")
        total = np.zeros(self.dim) if raw is None else _vec(base64.b64decode(raw))
        return total, self.num("pending_count")

    def weights(self, which: str = "weights") -> tuple[Vector, int]:
        """The global iterate (``"weights"``) or iterate average (``"average"``), and the
        online model version they belong to."""
        raw = self.get(which)
        w = np.zeros(self.dim) if raw is None else _vec(base64.b64decode(raw))
        return w, self.num("weights_version")

    def set_weights(self, w: Vector, average: Vector, version: int) -> None:
        self._set(weights=base64.b64encode(_blob(w)).decode(),
                  average=base64.b64encode(_blob(average)).decode(), weights_version=version)

    def durable(self) -> None:
        """fsync everything committed so far (WAL checkpoint).

        Commits reach the operating system at once (a killed process loses nothing) but are
        fsync'd only here: before a label is requested, before noise is drawn and after a
        noisy body is stored. A power cut can therefore lose only decisions of records that
        were *not* queried since the last call; redrawing those after the reboot reveals
        nothing that ever left the machine."""
        self._db.execute("PRAGMA wal_checkpoint(FULL)")

    def transaction(self) -> _Tx:
        return _Tx(self._db)

    # --- records ------------------------------------------------------------------------
    def seen(self, record_id: str) -> bool:
        return self._db.execute("SELECT 1 FROM records WHERE id=?", (record_id,)).fetchone() \
            is not None

    def decide(self, record_id: str, queried: bool, x: Vector, scores: dict[str, float], *,
               records_scheme: bool) -> int:
        """Store a record's query decision and scores (and the record, if queried); returns
        its seq."""
        seq = self.num("seq")
        with self.transaction():
            self._db.execute("INSERT INTO records VALUES (?,?,?,?,NULL,?)",
                             (record_id, seq, int(queried), _blob(x) if queried else None,
                              json.dumps(scores)))
            values: dict[str, Any] = {"seq": seq + 1}
            if records_scheme:
                values["since_update"] = self.num("since_update") + 1
            self._set(**values)
        if queried:
            self.durable()
        return seq

    def scored_since(self, seq: int) -> list[tuple[str, dict[str, float], bool]]:
        """``(id, scores, queried)`` of the records decided from position ``seq`` on."""
        return [(r, json.loads(s), bool(q)) for r, s, q in self._db.execute(
            "SELECT id, scores, queried FROM records WHERE seq>=? ORDER BY seq", (seq,))]

    def awaiting(self, record_id: str) -> Vector | None:
        """The stored record if it was queried and is still unlabelled."""
        row = self._db.execute("SELECT x FROM records WHERE id=? AND queried=1 AND label IS "
                               "NULL", (record_id,)).fetchone()
        return None if row is None else _vec(row[0])

    def n_awaiting(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM records WHERE queried=1 AND label "
                                    "IS NULL").fetchone()[0])

    def use_label(self, record_id: str, label: int, gradient: Vector) -> None:
        """Mark the label used and add its gradient to the open batch, atomically."""
        total, count = self.pending()
        with self.transaction():
            self._db.execute("UPDATE records SET label=?, x=NULL WHERE id=?",
                             (label, record_id))
            self._set(pending_sum=base64.b64encode(_blob(total + gradient)).decode(),
                      pending_count=count + 1)

    def park_label(self, record_id: str, label: int) -> None:
        """A label for a record not consumed yet: kept until that record arrives."""
        self._db.execute("INSERT INTO waiting_labels VALUES (?, ?) ON CONFLICT(id) DO "
                         "UPDATE SET label=excluded.label", (record_id, label))

    def parked_label(self, record_id: str) -> int | None:
        row = self._db.execute("SELECT label FROM waiting_labels WHERE id=?",
                               (record_id,)).fetchone()
        return None if row is None else int(row[0])

    def parked_for_awaiting(self) -> list[tuple[str, int]]:
        """Kept labels whose record was queried and still awaits one (a kill fell between
        the record's decision and the use of its kept label)."""
        return [(r, int(v)) for r, v in self._db.execute(
            "SELECT w.id, w.label FROM waiting_labels w JOIN records r ON r.id = w.id "
            "WHERE r.queried = 1 AND r.label IS NULL ORDER BY r.seq")]

    def set_labels_offset(self, offset: int) -> None:
        self._set(labels_offset=offset)

    # --- epochs and releases ------------------------------------------------------------
    def open_epoch(self, epoch: int) -> None:
        """Record that ``epoch`` is charged (after the ledger reservation)."""
        self._set(epoch=epoch, epochs_unclaimed=self.num("epochs_unclaimed") + 1)

    def reset_batch(self) -> None:
        """Close a batch that holds no label (nothing released)."""
        self._set(since_update=0)

    def store_release(self, key: str, body: str) -> None:
        """Store the noisy body and empty the batch, atomically."""
        with self.transaction():
            self._db.execute("INSERT INTO releases VALUES (?,?,?, 'stored')",
                             (key, self.num("releases"), body))
            self._set(pending_sum=base64.b64encode(_blob(np.zeros(self.dim))).decode(),
                      pending_count=0, since_update=0, epochs_unclaimed=0,
                      releases=self.num("releases") + 1)
        self.durable()

    def stored_releases(self) -> list[tuple[str, str]]:
        return [(k, b) for k, b in self._db.execute(
            "SELECT key, body FROM releases WHERE status='stored' ORDER BY seq")]

    def acknowledge(self, key: str) -> None:
        self._db.execute("UPDATE releases SET status='acknowledged' WHERE key=?", (key,))

    def counts(self) -> dict[str, int]:
        """Local summary: records consumed, queried, labelled, releases made and sent."""
        q = self._db.execute
        return {
            "records": self.num("seq"),
            "queried": int(q("SELECT COUNT(*) FROM records WHERE queried=1").fetchone()[0]),
            "labelled": int(q("SELECT COUNT(*) FROM records WHERE label IS NOT NULL")
                            .fetchone()[0]),
            "releases": self.num("releases"),
            "acknowledged": int(q("SELECT COUNT(*) FROM releases WHERE status="
                                  "'acknowledged'").fetchone()[0]),
        }


class _Tx:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self._db.execute("ROLLBACK" if exc_type is not None else "COMMIT")
