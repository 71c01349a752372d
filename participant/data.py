"""Load local records from CSV or Parquet in bounded-memory chunks and check them.

Checks, each failing with :class:`~common.errors.SchemaMismatch` naming the file, the column
and the first bad rows (rows count data rows from 1, the CSV header excluded):

- every study feature is present; any other column must be the record-key column
  (``id_column``) or explicitly ignored (``ignore``, e.g. an evaluation label);
- values are numeric, present (no empty/NA/NaN) and finite.

**Out-of-bounds policy.** The study's public bounds define the hash cuts and the grid, so a
value outside ``[lo, hi]`` is *clipped* to the nearest bound (``on_out_of_bounds="clip"``,
the default) and counted per column in :attr:`DataSource.report`. The counts are shown
locally and are never sent anywhere. ``on_out_of_bounds="error"`` refuses the file instead
(``check-data`` and ``score`` only: a release always clips, see :mod:`participant.policy`).

**Rows per record key.** ``rows_per_id=N`` (needs ``id_column``) keeps the first ``N`` rows
of each key in file order and counts the rest in :attr:`DataReport.dropped` (local only). A
key's kept rows depend on its own rows only, so one person changes at most ``N`` kept rows;
:mod:`participant.contribute` scales the noise by ``N``.

Memory stays bounded by the chunk size: Parquet is read batch by batch
(``ParquetFile.iter_batches``) and CSV through ``pyarrow.csv.open_csv`` streaming.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from numpy.typing import NDArray

from common.config import StudyConfig
from common.errors import SchemaMismatch
from participant.policy import keep_first_rows
from participant.progress import Progress

MAX_SHOWN = 5


@dataclass(frozen=True)
class DataSpec:
    """What the study expects: feature names and public bounds, plus local column roles."""

    features: tuple[str, ...]
    lo: NDArray[np.float64]
    hi: NDArray[np.float64]
    id_column: str | None = None
    ignore: tuple[str, ...] = ()
    on_out_of_bounds: str = "clip"
    rows_per_id: int | None = None

    @classmethod
    def from_config(cls, config: StudyConfig, **local: object) -> DataSpec:
        return cls(
            features=tuple(f.name for f in config.features),
            lo=np.array(config.lo, dtype=np.float64),
            hi=np.array(config.hi, dtype=np.float64),
            **local,  # type: ignore[arg-type]
        )


@dataclass
class DataReport:
    """Local-only facts about a pass over the file. Never sent to the coordinator."""

    path: str
    rows: int = 0
    clipped: dict[str, int] = field(default_factory=dict)
    dropped: int = 0

    @property
    def clipped_total(self) -> int:
        return sum(self.clipped.values())


@dataclass(frozen=True)
class Chunk:
    """Checked, clipped records ``X (n, d)`` and their keys (``None``: use row numbers)."""

    X: NDArray[np.float64]
    keys: pa.Array | None
    first_row: int


def _fail(
    path: Path, column: str, problem: str, rows: NDArray[np.int64], values: list[object]
) -> SchemaMismatch:
    shown = ", ".join(
        str(r) if v is None else f"{r} ({v!r})"
        for r, v in zip(rows[:MAX_SHOWN], values + [None] * MAX_SHOWN, strict=False)
    )
    return SchemaMismatch(
        f"{path}: column {column!r}: {problem}; first bad rows: {shown} "
        f"(data rows counted from 1, header excluded)",
        path=str(path),
        column=column,
        rows=[int(r) for r in rows[:MAX_SHOWN]],
    )


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
        if spec.rows_per_id is not None and spec.id_column is None:
            raise ValueError("rows_per_id needs an id_column")
        if not self.path.is_file():
            raise SchemaMismatch(f"{self.path}: no such data file", path=str(self.path))
        suffix = self.path.suffix.lower()
        if suffix in (".parquet", ".pq"):
            self.kind = "parquet"
        elif suffix in (".csv", ".txt"):
            self.kind = "csv"
        else:
            raise SchemaMismatch(
                f"{self.path}: unknown data format {suffix!r}; use .csv or .parquet",
                path=str(self.path),
            )
        self._check_columns(self._column_names())

    @property
    def columns(self) -> list[str]:
        cols = list(self.spec.features)
        if self.spec.id_column is not None:
            cols.append(self.spec.id_column)
        return cols

    def _column_names(self) -> list[str]:
        if self.kind == "parquet":
            return list(pq.read_schema(self.path).names)
        with open(self.path, "rb") as fh:
            header = fh.readline().decode("utf-8-sig").strip()
        if not header:
            raise SchemaMismatch(f"{self.path}: empty CSV file", path=str(self.path))
        reader = pacsv.open_csv(
            pa.py_buffer(header.encode() + b"\n"),
        )
        return list(reader.schema.names)

    def _check_columns(self, names: list[str]) -> None:
        missing = [f for f in self.spec.features if f not in names]
        if self.spec.id_column is not None and self.spec.id_column not in names:
            missing.append(self.spec.id_column)
        allowed = set(self.columns) | set(self.spec.ignore)
        extra = [n for n in names if n not in allowed]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"missing column(s) {missing}")
            if extra:
                parts.append(
                    f"unexpected column(s) {extra} (name a record key with --id-column, "
                    f"or skip a column such as a label with --ignore-column)"
                )
            raise SchemaMismatch(
                f"{self.path}: {'; '.join(parts)}; the study expects {list(self.spec.features)}",
                path=str(self.path),
                missing=missing,
                extra=extra,
            )

    def __iter__(self) -> Iterator[Chunk]:
        self.report = DataReport(str(self.path))
        self._per_id = {}
        bar = Progress(f"reading {self.path.name}", enabled=self.progress)
        if self.kind == "parquet":
            meta = pq.read_metadata(self.path)
            bar.total = meta.num_rows
            # pre_buffer=False: pyarrow's default pre-buffers whole row groups (~the file).
            batches = pq.ParquetFile(self.path, pre_buffer=False).iter_batches(
                batch_size=self.chunk_rows, columns=self.columns
            )
            yield from self._checked(batches, bar)
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
        types: dict[str, pa.DataType] = {
            f: (pa.float64() if typed else pa.string()) for f in self.spec.features
        }
        if self.spec.id_column is not None:
            types[self.spec.id_column] = pa.string()
        reader = pacsv.open_csv(
            self.path,
            read_options=pacsv.ReadOptions(block_size=self._csv_block_bytes()),
            convert_options=pacsv.ConvertOptions(
                column_types=types, include_columns=self.columns, strings_can_be_null=True
            ),
        )
        yield from reader

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
            X = np.empty((batch.num_rows, len(self.spec.features)), dtype=np.float64)
            for j, name in enumerate(self.spec.features):
                X[:, j] = self._column(batch.column(name), name, j)
            keys = None if self.spec.id_column is None else batch.column(self.spec.id_column)
            first = self.report.rows + 1
            if self.spec.rows_per_id is not None and keys is not None:
                if keys.null_count:
                    rows = np.flatnonzero(keys.is_null().to_numpy(zero_copy_only=False))
                    raise _fail(self.path, str(self.spec.id_column), "missing record keys",
                                rows + first, [])
                keep = keep_first_rows(self._per_id, keys.to_pylist(), self.spec.rows_per_id)
                self.report.dropped += int((~keep).sum())
                X, keys = X[keep], keys.filter(pa.array(keep))
            self.report.rows += batch.num_rows
            if self.kind == "csv":
                done_bytes += batch.nbytes
                bar.update(batch.num_rows, fraction=min(done_bytes / max(size, 1), 0.99))
            else:
                bar.update(batch.num_rows)
            yield Chunk(X=X, keys=keys, first_row=first)

    def _column(self, arr: pa.Array, name: str, j: int) -> NDArray[np.float64]:
        offset = self.report.rows + 1
        if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
            arr = self._parse_text(arr, name, offset)
        elif not (
            pa.types.is_integer(arr.type)
            or pa.types.is_floating(arr.type)
            or pa.types.is_decimal(arr.type)
        ):
            raise SchemaMismatch(
                f"{self.path}: column {name!r} has non-numeric type {arr.type}",
                path=str(self.path),
                column=name,
            )
        if arr.null_count:
            rows = np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))
            raise _fail(self.path, name, "missing values", rows + offset, [])
        x = np.array(arr.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
        bad = ~np.isfinite(x)
        if bad.any():
            rows = np.flatnonzero(bad)
            what = "missing values (NaN)" if np.isnan(x[rows[0]]) else "non-finite values"
            raise _fail(self.path, name, what, rows + offset, x[rows[:MAX_SHOWN]].tolist())
        lo, hi = self.spec.lo[j], self.spec.hi[j]
        out = (x < lo) | (x > hi)
        n_out = int(out.sum())
        if n_out:
            if self.spec.on_out_of_bounds == "error":
                rows = np.flatnonzero(out)
                raise _fail(
                    self.path, name, f"values outside the public bounds [{lo}, {hi}]",
                    rows + offset, x[rows[:MAX_SHOWN]].tolist(),
                )
            np.clip(x, lo, hi, out=x)
            self.report.clipped[name] = self.report.clipped.get(name, 0) + n_out
        return x

    def _parse_text(self, arr: pa.Array, name: str, offset: int) -> pa.Array:
        try:
            return pc.cast(arr, pa.float64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        rows, values = [], []
        for i, v in enumerate(arr.to_pylist()):
            if v is None:
                continue
            try:
                float(v)
            except ValueError:
                rows.append(i + offset)
                values.append(v)
                if len(rows) >= MAX_SHOWN:
                    break
        raise _fail(self.path, name, "non-numeric values", np.array(rows), values)


def load_all(source: DataSource) -> NDArray[np.float64]:
    """Concatenate every chunk (for small files and tests only)."""
    parts = [c.X for c in source]
    if not parts:
        return np.empty((0, len(source.spec.features)))
    return np.concatenate(parts)
