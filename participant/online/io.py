"""Inputs and outputs of ``fedod-participant stream``: records, labels, scores (all local).

- Records: JSON lines (one object per line, feature names as keys) or CSV with a header, on
  stdin or in files appearing in a watched directory (write a file under a name starting with
  ``.`` and rename it when complete: dot files are ignored).
- Labels: a file the reviewer appends to, one ``id,label`` (or ``{"id": ..., "label": ...}``)
  per line; ``1``/``outlier``/``+1`` is an outlier, ``0``/``-1``/``inlier`` an inlier. It is
  read from the offset stored in the cursor, so a restart reads each line once.
- Scores: CSV appended and flushed per record: ``id``, ``score_<model>`` per model (higher =
  more outlying; ``score_online`` is the classifier's margin), ``queried``.
- Ticks (``--clock ticks`` only): a JSON line ``{"tick": N}`` says the schedule's clock now
  reads window ``N`` (tests and replays drive the schedule by observed progress this way).
"""

from __future__ import annotations

import csv
import io
import json
import math
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.typing import NDArray

from common.errors import SchemaMismatch
from participant.online.engine import Scored, Streamer
from participant.online.store import StreamStore

_POSITIVE = {"1", "+1", "outlier", "true", "yes"}
_NEGATIVE = {"0", "-1", "inlier", "false", "no"}
Record = tuple[str, NDArray[np.float64]]


@dataclass(frozen=True)
class Tick:
    """The schedule clock now reads ``window`` (``--clock ticks``)."""

    window: int


class RecordParser:
    """Turn JSON-lines or CSV text lines into ``(id, features)``; ids default to the
    record's position in its input (``<prefix>#<n>``). A column that is neither a feature,
    the id nor in ``ignore`` (``--ignore-column``) stops the stream (exit 3, naming the fix),
    as the other data commands refuse such a file: a label column read by mistake never
    enters a record unnoticed."""

    def __init__(self, columns: list[str], id_column: str, prefix: str = "",
                 ignore: tuple[str, ...] = ()) -> None:
        self.columns, self.id_column, self.prefix = columns, id_column, prefix
        self.allowed = {*columns, id_column, *ignore, "tick"}  # a malformed tick: one bad line
        self.header: list[str] | None = None
        self.n = 0
        self.bad = 0
        self.json = False  # a JSON line was seen: a later non-JSON line is one bad record

    def _check(self, names: Iterable[str], where: str) -> None:
        if extra := [n for n in names if n not in self.allowed]:
            raise SchemaMismatch(
                f"{self.prefix or 'input'} {where}: unexpected column(s) {extra} "
                "(name a record key with --id-column, or skip a column such as a label with "
                f"--ignore-column); the study expects {self.columns}", extra=extra)

    def _row(self, doc: dict[str, Any]) -> Record | None:
        self._check(doc, f"record {self.n + 1}")
        self.n += 1
        try:
            x = np.array([float(doc[c]) for c in self.columns], dtype=np.float64)
        except (KeyError, TypeError, ValueError, OverflowError):  # one row: dropped, counted
            self.bad += 1
            return None
        if not np.all(np.isfinite(x)):
            self.bad += 1
            return None
        rid = doc.get(self.id_column)
        return (f"{self.prefix}#{self.n}" if rid in (None, "") else str(rid)), x

    def parse(self, line: str) -> Record | Tick | None:
        text = line.strip()
        if not text:
            return None
        if self.header is None and not text.startswith("{") and self.json:
            self.n += 1
            self.bad += 1
            return None
        if self.header is None and text.startswith("{"):
            self.json = True
            try:
                doc = json.loads(text)
            except json.JSONDecodeError:
                self.n += 1
                self.bad += 1
                return None
            if isinstance(doc, dict) and set(doc) == {"tick"} and isinstance(doc["tick"], int):
                return Tick(doc["tick"])
            if not isinstance(doc, dict):
                self.n += 1
                self.bad += 1
                return None
            return self._row(doc)
        try:
            fields = next(csv.reader(io.StringIO(text)))
        except csv.Error:  # e.g. a NUL byte: this line only
            self.n += self.header is not None
            self.bad += self.header is not None
            return None
        if self.header is None:
            self._check(fields, "CSV header")
            self.header = fields
            return None
        return self._row(dict(zip(self.header, fields, strict=False)))


def read_lines(stream: IO[str], parser: RecordParser) -> Iterator[Record | Tick]:
    """Records of a text stream; invalid UTF-8 (e.g. on stdin) spoils its own line only."""
    if isinstance(stream, io.TextIOWrapper):
        stream.reconfigure(errors="replace")
    for line in stream:
        record = parser.parse(line)
        if record is not None:
            yield record


def watch(directory: Path, columns: list[str], id_column: str, *, once: bool,
          poll: float = 0.5, ignore: tuple[str, ...] = ()) -> Iterator[Record | Tick]:
    """Records of every (non-dot) file in ``directory``, in name order, as files appear."""
    done: set[str] = set()
    while True:
        fresh = sorted(p for p in directory.iterdir()
                       if p.is_file() and not p.name.startswith(".") and p.name not in done)
        for path in fresh:
            with path.open(errors="replace") as fh:  # invalid UTF-8 spoils its own line only
                yield from read_lines(fh, RecordParser(columns, id_column, path.name, ignore))
            done.add(path.name)
        if once:
            return
        if not fresh:
            time.sleep(poll)


_END = object()


def until_deadlines(items: Iterator[Record | Tick], seconds_left: Callable[[], float]
                    ) -> Iterator[Record | Tick | None]:
    """``items`` as they arrive (read in a thread), and ``None`` each time ``seconds_left()``
    runs out first: the wall-clock schedule acts at a window's end even when no record
    comes."""
    inbox: queue.Queue[object] = queue.Queue(maxsize=1000)

    def pump() -> None:
        for item in items:
            inbox.put(item)
        inbox.put(_END)

    threading.Thread(target=pump, daemon=True).start()
    while True:
        try:
            item = inbox.get(timeout=max(seconds_left(), 0.0) + 0.01)
        except queue.Empty:
            yield None
            continue
        if item is _END:
            return
        yield item  # type: ignore[misc]


def parse_label(text: str) -> int | None:
    value = text.strip().lower()
    return 1 if value in _POSITIVE else -1 if value in _NEGATIVE else None


class LabelsFile:
    """The reviewer's append-only labels file, read from the cursor's offset."""

    def __init__(self, path: Path, store: StreamStore) -> None:
        self.path, self.store = path, store

    def poll(self, streamer: Streamer) -> int:
        """Apply every complete new line; returns how many labels were used."""
        if not self.path.exists():
            return 0
        offset, used = int(self.store.get("labels_offset", 0)), 0
        with self.path.open("rb") as fh:
            fh.seek(offset)
            for raw in fh:
                if not raw.endswith(b"\n"):
                    break  # a line still being written
                offset += len(raw)
                line = raw.decode("utf-8", "replace").strip()
                if line:
                    if line.startswith("{"):
                        doc = json.loads(line)
                        rid, value = str(doc.get("id")), str(doc.get("label"))
                    else:
                        rid, _, value = line.rpartition(",")
                    label = parse_label(value)
                    if label is not None and rid:
                        used += streamer.label(rid, label)
                self.store.set_labels_offset(offset)
        return used


def prompt_label(record_id: str, scored: Scored) -> int | None:
    """Ask on the terminal (stdin and stdout are a terminal)."""
    margin = scored.scores["online"]
    while True:
        answer = input(f"label record {record_id} (margin {margin:+.3f}): 1 = outlier, 0 = "
                       "inlier, empty = later: ")
        if not answer.strip():
            return None
        if (label := parse_label(answer)) is not None:
            return label


def _repair(path: Path) -> int:
    """Cut a line a killed run left half-written; returns the number of complete records."""
    data = path.read_bytes()
    keep = data[: data.rfind(b"\n") + 1]
    if keep != data:
        with path.open("r+b") as fh:
            fh.truncate(len(keep))
    return max(0, keep.count(b"\n") - 1)  # minus the header


class ScoreWriter:
    """Append score lines to a CSV, flushed per record (header once).

    ``written`` is how many records the file already holds; when it holds some, a restart
    appends the lines a killed run had decided but not written (:meth:`catch_up`). A new file
    starts with the next record."""

    def __init__(self, path: Path | None, models: list[str]) -> None:
        self.columns = ["id", *(f"score_{m}" for m in models), "queried"]
        new = path is None or not path.exists() or path.stat().st_size == 0
        self.written = 0 if new or path is None else _repair(path)
        self._fh: IO[str] = sys.stdout if path is None else path.open("a", newline="")
        self._csv = csv.writer(self._fh)
        if new:
            self._csv.writerow(self.columns)
            self._fh.flush()

    def catch_up(self, store: StreamStore) -> None:
        """Write the lines of records decided before a kill but not yet written."""
        if self._fh is sys.stdout or self.written == 0:
            return  # stdout, or a new file: it starts with the next record
        for rid, scores, queried in store.scored_since(self.written):
            self.write(Scored(rid, scores, queried))

    def write(self, scored: Scored) -> None:
        values = [scored.scores.get(c[6:], math.nan) for c in self.columns[1:-1]]
        self._csv.writerow([scored.record_id, *(f"{v:.6g}" for v in values),
                            int(scored.queried)])
        self._fh.flush()
        self.written += 1

    def close(self) -> None:
        if self._fh is not sys.stdout:
            self._fh.close()
