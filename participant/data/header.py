"""The header check of a local data file: its format from the file name, its column names,
and whether they match the study's schema (:class:`~participant.data.spec.DataSpec`).

Each failure is a :class:`~common.errors.SchemaMismatch` naming the file; the rows are read
and checked by :class:`participant.data.reader.DataSource`.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from common.errors import SchemaMismatch
from participant.data.spec import DataSpec


def data_kind(path: Path) -> str:
    """``"parquet"`` or ``"csv"``, from the file's suffix."""
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if suffix in (".csv", ".txt"):
        return "csv"
    raise SchemaMismatch(f"{path}: unknown data format {suffix!r}; use .csv or .parquet",
                         path=str(path))


def column_names(path: Path, kind: str) -> list[str] | None:
    """The file's column names: the Parquet schema's, or the CSV header's; ``None`` for a
    CSV file with nothing in it (0 bytes, or blank lines only): no records, like a file with
    a header and no rows."""
    if kind == "parquet":
        return list(pq.read_schema(path).names)
    with open(path, "rb") as fh:
        header = fh.readline().decode("utf-8-sig").strip()
        if not header:
            if any(line.strip() for line in fh):
                raise SchemaMismatch(f"{path}: the first line is blank; a CSV file starts with "
                                     "its header line", path=str(path))
            return None
    reader = pacsv.open_csv(
        pa.py_buffer(header.encode() + b"\n"),
    )
    return list(reader.schema.names)


def check_columns(path: Path, spec: DataSpec, names: list[str]) -> None:
    """Every study feature present; any other column the record key or explicitly ignored."""
    missing = [f for f in spec.features if f not in names]
    if spec.id_column is not None and spec.id_column not in names:
        missing.append(spec.id_column)
    allowed = set(spec.columns) | set(spec.ignore)
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
            f"{path}: {'; '.join(parts)}; the study expects {list(spec.features)}",
            path=str(path),
            missing=missing,
            extra=extra,
        )
