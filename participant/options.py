"""How a participant reads its local file: the options every command shares (record key,
ignored columns, out-of-bounds policy, row cap per person, engine)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.study.config import StudyConfig
from participant.data.dataset import DatasetSource, open_source
from participant.data.reader import DataSource, DataSpec


@dataclass(frozen=True)
class DataOptions:
    """How to read the local file: record key, ignored columns, out-of-bounds policy, and
    (releases only) the most rows one record key may contribute."""

    id_column: str | None = None
    ignore: tuple[str, ...] = ()
    on_out_of_bounds: str = "clip"
    chunk_rows: int = 65_536
    progress: bool = False
    rows_per_id: int | None = None
    engine: str = "inprocess"  # or "dask" (participant.dask.engine)
    scheduler: str | None = None  # Dask scheduler address; None: start a LocalCluster

    def source(self, path: str | Path, config: StudyConfig, *, release: bool = False
               ) -> DataSource | DatasetSource:
        """A file's :class:`DataSource`, or a :class:`DatasetSource` for a directory or glob."""
        spec = DataSpec.from_config(
            config, id_column=self.id_column, ignore=self.ignore,
            on_out_of_bounds=self.on_out_of_bounds,
            rows_per_id=self.rows_per_id if release else None,
            on_bad_row="drop" if release else "error",  # participant.data.reader: one bad row
        )
        source = open_source(path, spec, chunk_rows=self.chunk_rows, progress=self.progress)
        if spec.rows_per_id is not None and (
            isinstance(source, DatasetSource) or self.engine != "inprocess"
        ):
            raise ValueError("--rows-per-id counts a person's rows within one file; give a "
                             "single file with the in-process engine (rows of one person in "
                             "several files or partitions would not be capped)")
        return source

    def engine_kw(self) -> dict[str, Any]:
        """Keyword arguments for the engine's functions (``scheduler`` for Dask)."""
        if self.engine not in ("inprocess", "dask"):
            raise ValueError(f"unknown engine {self.engine!r}; use 'inprocess' or 'dask'")
        return {"scheduler": self.scheduler} if self.engine == "dask" else {}

    def counter(self) -> Callable[..., Any] | None:
        """The exact-histogram function of the chosen engine (None: in-process)."""
        if not (engine_kw := self.engine_kw()):
            return None
        from participant.dask.engine import exact_histograms as on_dask

        return functools.partial(on_dask, **engine_kw)
