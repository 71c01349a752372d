"""The durable cursor of ``fedod-participant stream``: one sqlite3 file per study (0600).

Every state change is one transaction, committed *before* its effect can be observed:

- a record's query decision is stored (with the record, if queried) before its score line is
  written or its label requested (fsync'd first when queried: :meth:`StreamStore.durable`),
  so a restart never re-decides a record (re-spending ``epsilon_select``) and skips records
  already consumed (keyed by record id);
- a label is stored on its record (queried, in the open window); the window's batch is formed
  only when the window closes, so a record enters at most one batch (its window's);
- a window's noisy release is stored as the exact request body in the same transaction that
  closes the window (unanswered queries resolved as "no answer", records dropped), and re-sent
  byte for byte until acknowledged; noise is drawn only for a window not yet closed (a draw
  lost to a crash before its commit was never seen);
- a schedule window's charge is reserved in the participant ledger before it is opened here,
  and so before its first query decision;
- in the centring window every used slot's record is kept (none is queried) until the window
  closes, when their noisy sum is stored as its release; records are kept centred on the
  served centre once there is one (it is stored here with the weights).

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
    x BLOB, label INTEGER, scores TEXT NOT NULL, win INTEGER, slot INTEGER
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
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(records)")}
        for column in ("win", "slot") if "slot" not in columns else ():  # a pre-schedule file
            self._db.execute(f"ALTER TABLE records ADD COLUMN {column} INTEGER")

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

    def decide(self, record_id: str, queried: bool, x: Vector, scores: dict[str, float],
               window: int, slot: int | None, keep: bool = False) -> int:
        """Store a record's query decision and scores (and the record, if queried or
        ``keep``: a centring slot); returns its seq. ``slot`` None: beyond the window's slots
        or before the centring window (scored, never used for learning)."""
        seq = self.num("seq")
        with self.transaction():
            self._db.execute("INSERT INTO records VALUES (?,?,?,?,NULL,?,?,?)",
                             (record_id, seq, int(queried),
                              _blob(x) if queried or keep else None,
                              json.dumps(scores), window, slot))
            values: dict[str, Any] = {"seq": seq + 1}
            if slot is not None:
                values["slots"] = slot + 1
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

    def use_label(self, record_id: str, label: int) -> None:
        """Keep the reviewer's label (+1/-1) of a queried record of the open window."""
        self._db.execute("UPDATE records SET label=? WHERE id=?", (label, record_id))

    def window_queried(self, window: int) -> list[tuple[Vector, int | None]]:
        """``(record, label or None)`` of the window's queried slots."""
        return [(_vec(x), None if label is None else int(label)) for x, label in
                self._db.execute("SELECT x, label FROM records WHERE win=? AND queried=1 "
                                 "AND slot IS NOT NULL ORDER BY seq", (window,))]

    def window_records(self, window: int) -> list[Vector]:
        """The kept records of the window's used slots (the centring window's)."""
        return [_vec(x) for (x,) in self._db.execute(
            "SELECT x FROM records WHERE win=? AND slot IS NOT NULL AND x IS NOT NULL "
            "ORDER BY seq", (window,))]

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

    # --- schedule windows and releases -------------------------------------------------
    def window(self) -> tuple[int, int, int]:
        """``(open or last window, last closed window, slots used in the open one)``; -1 for
        none yet."""
        return int(self.get("window", -1)), int(self.get("closed", -1)), self.num("slots")

    def open_window(self, window: int, *, skipped: bool = False) -> None:
        """Record that ``window`` is open (after its ledger reservation); ``skipped``: a
        centring window opened after the centre was fixed, neither charged nor released."""
        self._set(window=window, slots=0, skipped_window=window if skipped else -1)

    def skipped(self, window: int) -> bool:
        """Whether ``window`` was opened as skipped (:meth:`open_window`)."""
        return int(self.get("skipped_window", -1)) == window >= 0

    def close_skipped(self, window: int) -> None:
        """Close a skipped window: no release, its records are dropped."""
        with self.transaction():
            self._db.execute("UPDATE records SET x=NULL WHERE win=?", (window,))
            self._set(closed=window)
        self.durable()

    def close_window(self, window: int, key: str, body: str, **state: str) -> None:
        """Store the window's noisy release and close it, atomically: its unanswered queries
        are resolved as "no answer" (label 0), its records are dropped and ``state`` (the
        FTRL tree, its noisy nodes never redrawn) is kept."""
        with self.transaction():
            self._db.execute("INSERT INTO releases VALUES (?,?,?, 'stored')",
                             (key, self.num("releases"), body))
            self._db.execute("UPDATE records SET label=COALESCE(label, 0) WHERE win=? AND "
                             "queried=1", (window,))
            self._db.execute("UPDATE records SET x=NULL WHERE win=?", (window,))
            self._set(closed=window, releases=self.num("releases") + 1, **state)
        self.durable()

    def replace_release(self, key: str, body: str) -> None:
        """Re-wrap a stored (never accepted) release under a new config version."""
        self._db.execute("UPDATE releases SET body=? WHERE key=? AND status='stored'",
                         (body, key))
        self.durable()

    def stored_releases(self) -> list[tuple[str, str]]:
        return [(k, b) for k, b in self._db.execute(
            "SELECT key, body FROM releases WHERE status='stored' ORDER BY seq")]

    def acknowledge(self, key: str) -> None:
        self._db.execute("UPDATE releases SET status='acknowledged' WHERE key=?", (key,))

    def refuse(self, key: str) -> None:
        """A stored release the coordinator refused for good (a late centring release): never
        re-sent; its window stays charged here (its noisy bytes were sent)."""
        self._db.execute("UPDATE releases SET status='refused' WHERE key=?", (key,))

    def centre(self) -> Vector | None:
        """The centre served by the coordinator (None: none yet, or no centring)."""
        raw = self.get("centre")
        return None if raw is None else _vec(base64.b64decode(raw))

    def set_centre(self, centre: Vector) -> None:
        self._set(centre=base64.b64encode(_blob(centre)).decode())

    def counts(self) -> dict[str, int]:
        """Local summary: records consumed, queried, labelled, beyond their window's slots,
        releases made and sent."""
        q = self._db.execute
        return {
            "records": self.num("seq"),
            "queried": int(q("SELECT COUNT(*) FROM records WHERE queried=1").fetchone()[0]),
            "labelled": int(q("SELECT COUNT(*) FROM records WHERE label IN (1, -1)")
                            .fetchone()[0]),
            "beyond_slots": int(q("SELECT COUNT(*) FROM records WHERE slot IS NULL")
                                .fetchone()[0]),
            "releases": self.num("releases"),
            "acknowledged": int(q("SELECT COUNT(*) FROM releases WHERE status="
                                  "'acknowledged'").fetchone()[0]),
            "refused": int(q("SELECT COUNT(*) FROM releases WHERE status='refused'")
                           .fetchone()[0]),
        }


class _Tx:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self._db.execute("ROLLBACK" if exc_type is not None else "COMMIT")
