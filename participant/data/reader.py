"""Load local records from CSV or Parquet in bounded-memory chunks and check them.

Checks (the header's in :mod:`participant.data.header`), each failing with
:class:`~common.errors.SchemaMismatch` naming the file, the column and the first bad rows
(rows count data rows from 1, the CSV header excluded):

- every study feature is present; any other column must be the record-key column
  (``id_column``) or explicitly ignored (``ignore``, e.g. an evaluation label);
- values are numeric, present (no empty/NA/NaN) and finite. Every bad column is named in one
  error.

**Malformed rows in a release** (``on_bad_row="drop"``, what every release path uses, see
:meth:`participant.agent.DataOptions.source`): refusing the file because of one bad cell
would make the release depend on one row (a noise-only substitute instead of the data), so
a row with an empty, NA, NaN, non-numeric or infinite value in a study feature, a missing
record key under ``rows_per_id``, or a CSV line with the wrong number of fields is *dropped*
and counted per column in :attr:`DataReport.malformed` (local only, never sent, like the
clipping counts). Each verdict depends on that row alone (:mod:`participant.data.cells`); CSV
features are read as text and converted cell by cell, and a release reads CSV lines without
quoting, so an unbalanced quote spoils its own line only (a quoted number such as ``"1.5"``
is still read). Dropping a row is removing one record, the unit of privacy. What no single
row can cause (a missing or unreadable file, a missing or unexpected column, a Parquet
column of a non-numeric type) still fails; a release then sends its noise-only substitute.
``check-data`` and ``score`` release nothing and keep refusing (``on_bad_row="error"``).

**Out-of-bounds policy.** The study's public bounds define the hash cuts and the grid, so a
value outside ``[lo, hi]`` is *clipped* to the nearest bound (``on_out_of_bounds="clip"``,
the default) and counted per column in :attr:`DataSource.report`. The counts are shown
locally and are never sent anywhere. ``on_out_of_bounds="error"`` refuses the file instead
(``check-data`` and ``score`` only: a release always clips, see :mod:`participant.release.policy`).

**Rows per record key.** ``rows_per_id=N`` (needs ``id_column``) keeps the first ``N`` rows
of each key in file order and counts the rest in :attr:`DataReport.dropped` (local only). A
key's kept rows depend on its own rows only, so one person changes at most ``N`` kept rows;
:mod:`participant.release.contribute` scales the noise by ``N``.

Memory stays bounded by the chunk size: Parquet is read batch by batch
(``ParquetFile.iter_batches``) and CSV through ``pyarrow.csv.open_csv`` streaming.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from numpy.typing import NDArray

from common.errors import SchemaMismatch
from participant.data.cells import MAX_SHOWN, column_cells, column_error, joined_error, shown
from participant.data.header import check_columns, column_names, data_kind
from participant.data.spec import WRONG_FIELDS, Chunk, DataReport, DataSpec
from participant.progress import Progress

__all__ = ["Chunk", "DataReport", "DataSource", "DataSpec", "WRONG_FIELDS", "keep_first_rows",
           "load_all"]


def keep_first_rows(seen: dict[object, int], keys: list[object], cap: int) -> NDArray[np.bool_]:
    """Mask keeping each key's first ``cap`` rows; ``seen`` carries counts across chunks."""
    keep = np.ones(len(keys), dtype=bool)
    for i, key in enumerate(keys):
        n = seen.get(key, 0) + 1
        seen[key] = n
        keep[i] = n <= cap
    return keep


class DataSource:
    """Iterate over a CSV or Parquet file as checked :class:`Chunk` objects."""

    def __init__(
        self,
        path: str | Path,
        spec: DataSpec,
        *,
        chunk_rows: int = 65_536,
        progress: bool = False,
    ) -> None:
        self.path = Path(path)
        self.spec = spec
        self.chunk_rows = chunk_rows
        self.progress = progress
        self.report = DataReport(str(self.path))
        self._per_id: dict[object, int] = {}
        self._wrong_fields = 0  # CSV lines a release skipped for their shape (reader threads)
        if spec.rows_per_id is not None and spec.id_column is None:
            raise ValueError("rows_per_id needs an id_column")
        if not self.path.is_file():
            raise SchemaMismatch(f"{self.path}: no such data file", path=str(self.path))
        self.kind = data_kind(self.path)
        names = column_names(self.path, self.kind)
        self.empty = names is None  # a CSV with nothing in it: no records, like a header only
        if names is not None:
            check_columns(self.path, spec, names)

    @property
    def columns(self) -> list[str]:
        return self.spec.columns

    def __iter__(self) -> Iterator[Chunk]:
        self.report = DataReport(str(self.path))
        self._per_id = {}
        self._wrong_fields = 0
        bar = Progress(f"reading {self.path.name}", enabled=self.progress)
        if self.empty:
            bar.close()
            return
        if self.kind == "parquet":
            meta = pq.read_metadata(self.path)
            bar.total = meta.num_rows
            # pre_buffer=False: pyarrow's default pre-buffers whole row groups (~the file).
            batches = pq.ParquetFile(self.path, pre_buffer=False).iter_batches(
                batch_size=self.chunk_rows, columns=self.columns
            )
            yield from self._checked(batches, bar)
        elif self.spec.on_bad_row == "drop":
            yield from self._checked(self._csv_batches(typed=False), bar)
            self._sync_wrong_fields()
        else:
            try:
                yield from self._checked(self._csv_batches(typed=True), bar)
            except pa.ArrowInvalid as exc:
                # A value did not parse as a number: re-read as text to name the rows.
                self.report = DataReport(str(self.path))
                try:
                    for _ in self._checked(self._csv_batches(typed=False), bar):
                        pass
                except pa.ArrowInvalid as text_exc:  # malformed CSV, e.g. a short row
                    raise SchemaMismatch(f"{self.path}: {text_exc}", path=str(self.path)) from exc
                raise SchemaMismatch(f"{self.path}: {exc}", path=str(self.path)) from exc
        bar.close()

    def _csv_batches(self, *, typed: bool) -> Iterator[pa.RecordBatch]:
        """CSV batches; ``typed=False`` reads the features as text. When dropping malformed
        rows, every line is one row (no quoting: an unbalanced quote cannot swallow the lines
        after it) and a line with the wrong number of fields is skipped and counted."""
        drop = self.spec.on_bad_row == "drop"
        text = pa.binary() if drop else pa.string()  # binary: invalid UTF-8 is one bad cell
        types: dict[str, pa.DataType] = {
            f: (pa.float64() if typed else text) for f in self.spec.features
        }
        if self.spec.id_column is not None:
            types[self.spec.id_column] = text
        parse = pacsv.ParseOptions()
        if drop:
            parse = pacsv.ParseOptions(quote_char=False, invalid_row_handler=self._bad_shape)
        reader = pacsv.open_csv(
            self.path,
            read_options=pacsv.ReadOptions(block_size=self._csv_block_bytes()),
            parse_options=parse,
            convert_options=pacsv.ConvertOptions(
                column_types=types, include_columns=self.columns, strings_can_be_null=True,
                check_utf8=not drop,
            ),
        )
        yield from reader

    def _bad_shape(self, row: object) -> str:
        """A CSV line with the wrong number of fields: dropped and counted (releases only).
        Called on pyarrow's reader threads: it alone writes ``_wrong_fields``."""
        self._wrong_fields += 1
        if len(self.report.bad_lines) < MAX_SHOWN:
            self.report.bad_lines.append(str(getattr(row, "text", ""))[:80])
        return "skip"

    def _sync_wrong_fields(self) -> None:
        """Fold the reader threads' count into the report (on the consuming thread)."""
        new = self._wrong_fields - self.report.malformed.get(WRONG_FIELDS, 0)
        if new:
            self.report.malformed[WRONG_FIELDS] = self._wrong_fields
            self.report.malformed_rows += new

    def _csv_block_bytes(self) -> int:
        """CSV block size: roughly ``chunk_rows`` rows of ~20 bytes per value, 1-64 MiB."""
        estimate = self.chunk_rows * 20 * (len(self.columns) + len(self.spec.ignore))
        return int(min(max(estimate, 1 << 20), 64 << 20))

    def _checked(self, batches: Iterator[pa.RecordBatch], bar: Progress) -> Iterator[Chunk]:
        size = self.path.stat().st_size
        done_bytes = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            first = self.report.rows + 1
            X, bad = self._features(batch, first)
            keys = None if self.spec.id_column is None else batch.column(self.spec.id_column)
            if self.spec.rows_per_id is not None and keys is not None and keys.null_count:
                no_key = keys.is_null().to_numpy(zero_copy_only=False)
                if self.spec.on_bad_row != "drop":
                    raise column_error(self.path, str(self.spec.id_column), "missing record keys",
                                np.flatnonzero(no_key) + first, [])
                self._count(str(self.spec.id_column), no_key, keys, first, "missing record keys")
                bad |= no_key
            if bad.any():  # releases only: a malformed row is dropped, like a removed record
                self.report.malformed_rows += int(bad.sum())
                X = X[~bad]
                keys = None if keys is None else keys.filter(pa.array(~bad))
            self._clip(X, first, bad)
            if self.spec.rows_per_id is not None and keys is not None:
                keep = keep_first_rows(self._per_id, keys.to_pylist(), self.spec.rows_per_id)
                self.report.dropped += int((~keep).sum())
                X, keys = X[keep], keys.filter(pa.array(keep))
            self.report.rows += batch.num_rows
            self._sync_wrong_fields()
            if self.kind == "csv":
                done_bytes += batch.nbytes
                bar.update(batch.num_rows, fraction=min(done_bytes / max(size, 1), 0.99))
            else:
                bar.update(batch.num_rows)
            yield Chunk(X=X, keys=keys, first_row=first)

    def _count(self, column: str, mask: NDArray[np.bool_], arr: pa.Array, first: int,
               problem: str) -> None:
        """Count a column's malformed rows; keep its first few (row, value) and the problem
        for a whole-file check's refusal (local only)."""
        if not (n := int(mask.sum())):
            return
        r = self.report
        r.malformed[column] = r.malformed.get(column, 0) + n
        r.problems.setdefault(column, problem)
        seen = r.first_bad.setdefault(column, [])
        if len(seen) < MAX_SHOWN:
            rows = np.flatnonzero(mask)[:MAX_SHOWN - len(seen)]
            seen.extend(zip((rows + first).tolist(), shown(arr, rows), strict=True))

    def _features(self, batch: pa.RecordBatch, first: int
                  ) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        """The feature matrix and the rows with a malformed cell. Refusing (``check-data``,
        ``score``), every bad column is named in one error; dropping, each is counted."""
        X = np.empty((batch.num_rows, len(self.spec.features)), dtype=np.float64)
        bad = np.zeros(batch.num_rows, dtype=np.bool_)
        errors: list[SchemaMismatch] = []
        for j, name in enumerate(self.spec.features):
            arr = batch.column(name)
            cells = column_cells(arr, unquote=self.spec.on_bad_row == "drop")
            if cells is None:
                raise SchemaMismatch(
                    f"{self.path}: column {name!r} has non-numeric type {arr.type}",
                    path=str(self.path), column=name,
                )
            X[:, j] = cells.x
            col_bad = cells.bad
            if not col_bad.any():
                continue
            if self.spec.on_bad_row == "drop":
                self._count(name, col_bad, arr, first, cells.problem())
                bad |= col_bad
                continue
            rows = np.flatnonzero(col_bad)
            errors.append(column_error(self.path, name, cells.problem(), rows + first,
                                shown(arr, rows[:MAX_SHOWN])))
        if errors:
            raise joined_error(errors)
        return X, bad

    def _clip(self, X: NDArray[np.float64], first: int, dropped: NDArray[np.bool_]) -> None:
        """Clip each column to the public bounds in place and count (or refuse, ``error``)."""
        errors: list[SchemaMismatch] = []
        for j, name in enumerate(self.spec.features):
            lo, hi = self.spec.lo[j], self.spec.hi[j]
            out = (X[:, j] < lo) | (X[:, j] > hi)
            n_out = int(out.sum())
            if not n_out:
                continue
            if self.spec.on_out_of_bounds == "error":
                rows = np.flatnonzero(out)
                kept_rows = np.flatnonzero(~dropped)[rows]  # row numbers in the file
                errors.append(column_error(
                    self.path, name, f"values outside the public bounds [{lo}, {hi}]",
                    kept_rows + first, X[rows[:MAX_SHOWN], j].tolist(),
                ))
                continue
            np.clip(X[:, j], lo, hi, out=X[:, j])
            self.report.clipped[name] = self.report.clipped.get(name, 0) + n_out
        if errors:
            raise joined_error(errors)


def load_all(source: DataSource) -> NDArray[np.float64]:
    """Concatenate every chunk (for small files and tests only)."""
    parts = [c.X for c in source]
    if not parts:
        return np.empty((0, len(source.spec.features)))
    return np.concatenate(parts)
