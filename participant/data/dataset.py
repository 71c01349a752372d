"""A local *dataset*: one data file, or a directory or glob of many CSV/Parquet files.

Each file is one partition. Every file is read and checked by
:class:`participant.data.reader.DataSource`
(chunk by chunk, bounded memory), so an error names the file, the column and the rows
counted from 1 within that file, exactly as for a single file. :class:`DatasetSource` chains
the files in sorted name order for the in-process engine; the Dask engine
(``participant.dask.engine``) hands the same files to its workers.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from common.errors import SchemaMismatch
from participant.data.reader import Chunk, DataReport, DataSource, DataSpec

SUFFIXES = (".parquet", ".pq", ".csv", ".txt")


def dataset_files(path: str | Path) -> list[Path]:
    """The files of a dataset, sorted: a file itself, a directory's data files, or a glob."""
    text = str(path)
    if glob.has_magic(text):
        files = [Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file()]
    elif Path(text).is_dir():
        files = [p for p in Path(text).rglob("*")
                 if p.is_file() and not p.name.startswith((".", "_"))]
    else:
        return [Path(text)]
    files = sorted(p for p in files if p.suffix.lower() in SUFFIXES)
    if not files:
        raise SchemaMismatch(f"{path}: no .csv or .parquet files in this dataset", path=text)
    return files


def merge_reports(path: str, reports: list[DataReport]) -> DataReport:
    """One report for a dataset: rows, dropped, malformed and clipped counts summed over files."""
    total = DataReport(path)
    for r in reports:
        total.rows += r.rows
        total.dropped += r.dropped
        total.malformed_rows += r.malformed_rows
        for name, n in r.clipped.items():
            total.clipped[name] = total.clipped.get(name, 0) + n
        for name, n in r.malformed.items():
            total.malformed[name] = total.malformed.get(name, 0) + n
        for name, problem in r.problems.items():
            total.problems.setdefault(name, problem)
            # rows are counted within each file: name the file with them
            total.first_bad.setdefault(name, []).extend(
                (f"{Path(r.path).name} row {row}", value) for row, value in r.first_bad[name])
        total.bad_lines.extend(r.bad_lines)
    return total


class DatasetSource:
    """Iterate over every file of a dataset as checked chunks (rows numbered dataset-wide)."""

    def __init__(
        self, path: str | Path, spec: DataSpec, *, chunk_rows: int = 65_536,
        progress: bool = False,
    ) -> None:
        self.path = Path(path)
        self.spec = spec
        self.chunk_rows = chunk_rows
        self.progress = progress
        self.files = dataset_files(path)
        self.report = DataReport(str(self.path))

    def file_source(self, file: Path) -> DataSource:
        return DataSource(file, self.spec, chunk_rows=self.chunk_rows, progress=self.progress)

    def __iter__(self) -> Iterator[Chunk]:
        reports: list[DataReport] = []
        offset = 0
        for file in self.files:
            source = self.file_source(file)
            for chunk in source:
                yield replace(chunk, first_row=chunk.first_row + offset)
            reports.append(source.report)
            offset += source.report.rows
            self.report = merge_reports(str(self.path), reports)


def open_source(
    path: str | Path, spec: DataSpec, *, chunk_rows: int = 65_536, progress: bool = False
) -> DataSource | DatasetSource:
    """A :class:`DataSource` for one file, a :class:`DatasetSource` for a directory or glob."""
    if glob.has_magic(str(path)) or Path(path).is_dir():
        return DatasetSource(path, spec, chunk_rows=chunk_rows, progress=progress)
    return DataSource(path, spec, chunk_rows=chunk_rows, progress=progress)
