"""What a study expects of a local file (:class:`DataSpec`), what a pass over it found
(:class:`DataReport`, local only) and the checked records it yields (:class:`Chunk`).

See :mod:`participant.data.reader` for the checks and the reading.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from common.study.config import StudyConfig


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
    on_bad_row: str = "error"  # "drop": a release drops and counts malformed rows

    @property
    def columns(self) -> list[str]:
        """The columns read: the features, then the record key if there is one."""
        return [*self.features, *([] if self.id_column is None else [self.id_column])]

    @classmethod
    def from_config(cls, config: StudyConfig, **local: object) -> DataSpec:
        return cls(
            features=tuple(f.name for f in config.features),
            lo=np.array(config.lo, dtype=np.float64),
            hi=np.array(config.hi, dtype=np.float64),
            **local,  # type: ignore[arg-type]
        )


WRONG_FIELDS = "(line with the wrong number of fields)"
"""The :attr:`DataReport.malformed` key of CSV lines a release skipped for their shape."""


@dataclass
class DataReport:
    """Local-only facts about a pass over the file. Never sent to the coordinator."""

    path: str
    rows: int = 0
    clipped: dict[str, int] = field(default_factory=dict)
    dropped: int = 0
    malformed: dict[str, int] = field(default_factory=dict)
    malformed_rows: int = 0
    problems: dict[str, str] = field(default_factory=dict)
    """Per malformed column: what is wrong (``non-numeric values``, ...)."""
    first_bad: dict[str, list[tuple[int | str, object]]] = field(default_factory=dict)
    """Per malformed column: its first bad rows (row number, or file and row number in a
    dataset, and the raw value)."""
    bad_lines: list[str] = field(default_factory=list)
    """The first CSV lines with the wrong number of fields (their text, cut at 80)."""

    @property
    def records(self) -> int:
        """Records kept: rows read minus those with a malformed cell (``rows`` never counts
        the CSV lines skipped for their shape)."""
        return self.rows - self.malformed_rows + self.malformed.get(WRONG_FIELDS, 0)

    @property
    def clipped_total(self) -> int:
        return sum(self.clipped.values())

    def malformed_note(self) -> str | None:
        """A local-only line on the malformed rows a release dropped (``None``: none)."""
        if not self.malformed_rows:
            return None
        per = ", ".join(f"{name}: {n}" for name, n in sorted(self.malformed.items()))
        return (f"{self.path}: {self.malformed_rows} malformed row(s) dropped from the release "
                f"(empty, NA, NaN, non-numeric or infinite values, or a line with the wrong "
                f"number of fields; per column: {per}); local only, never sent")


@dataclass(frozen=True)
class Chunk:
    """Checked, clipped records ``X (n, d)`` and their keys (``None``: use row numbers)."""

    X: NDArray[np.float64]
    keys: pa.Array | None
    first_row: int
