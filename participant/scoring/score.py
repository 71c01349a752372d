"""Score local records with the global model's detectors and write the results.

Two passes with bounded memory: the data file is read chunk by chunk and every detector's
``decision_function`` (higher = more outlying) is kept per record (8 bytes per record and
detector); then the per-detector scores are turned into rank percentiles, combined, ranked,
and written chunk by chunk to CSV or Parquet.

Combined score (:func:`common.detectors.combine.combine`): the weighted mean over detectors
of each record's rank percentile (average rank of ties, as ``scipy.stats.rankdata(scores,
"average")``, divided by ``n``; in ``(0, 1]``, 1 = most outlying of the local file; computed
with numpy, not scipy, whose import alone took 0.55 s of every ``score`` run), so detectors on
different scales are comparable. The weights come from public inputs only
(:func:`common.detectors.combine.study_weights`: each detector's expected signal-to-noise
from the signed config); equal weights when the study declares no cohort size and expected
records. ``rank`` is 1 for the most outlying record;
``outlier`` flags the ``top_k`` records, or ``ceil(contamination * n)`` of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from numpy.typing import NDArray

from common.detectors.combine import average_ranks, combine
from participant.data.dataset import DatasetSource
from participant.data.reader import DataSource
from participant.progress import Progress

WRITE_ROWS = 262_144
__all__ = ["ScoreSummary", "average_ranks", "combine", "flag_count", "score_source"]


class Detector(Protocol):
    def decision_function(self, X: NDArray[np.float64]) -> NDArray[np.float64]: ...


class CohortColumns(Protocol):
    """What scoring needs of a study's released cohorts
    (:class:`participant.scoring.cohorts.Cohorts`): the extra score columns of records."""

    def columns(self, X: NDArray[np.float64]) -> dict[str, NDArray[Any]]: ...


@dataclass(frozen=True)
class ScoreSummary:
    """Local summary of a scoring run."""

    rows: int
    flagged: int
    output: str
    clipped: int


def flag_count(n: int, *, contamination: float | None, top_k: int | None) -> int:
    """How many records to flag: ``top_k`` (at most n), else ``ceil(contamination * n)``."""
    if top_k is not None:
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        return min(top_k, n)
    c = 0.05 if contamination is None else contamination
    if not 0 <= c <= 0.5:
        raise ValueError(f"contamination must be in [0, 0.5], got {c}")
    return min(n, math.ceil(c * n))


def _is_parquet(path: Path) -> bool:
    """True for .parquet/.pq, False for .csv; any other name is refused."""
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".parquet", ".pq"):
        raise ValueError(f"output {path}: use a .csv or .parquet file name")
    return suffix != ".csv"


def score_source(
    source: DataSource | DatasetSource,
    detectors: Mapping[str, Detector],
    output: str | Path,
    *,
    contamination: float | None = None,
    top_k: int | None = None,
    progress: bool = False,
    weights: Mapping[str, float] | None = None,
    cohorts: CohortColumns | None = None,
) -> ScoreSummary:
    """Score every record of ``source`` with each detector and write ``output`` (with each
    record's released cohort and distance to its centre when ``cohorts`` is given); the
    combined score weighs the detectors by ``weights`` (public; ``None``: equal)."""
    output = Path(output)
    parquet = _is_parquet(output)  # refuse a bad name before the scoring work
    parts: dict[str, list[NDArray[np.float64]]] = {name: [] for name in detectors}
    keys: list[pa.Array] = []
    extra: dict[str, list[NDArray[np.generic]]] = {}
    source.progress = progress
    for chunk in source:
        for col, values in (cohorts.columns(chunk.X) if cohorts else {}).items():
            extra.setdefault(col, []).append(values)
        for name, det in detectors.items():
            parts[name].append(np.asarray(det.decision_function(chunk.X), dtype=np.float64))
        if chunk.keys is not None:
            keys.append(chunk.keys)
    n = source.report.rows
    if n == 0:
        raise ValueError(f"{source.path}: no records to score")
    scores = {name: np.concatenate(p) for name, p in parts.items()}
    cohort_cols = {col: np.concatenate(v) for col, v in extra.items()}
    del parts, extra
    combined, rank = combine(scores, weights)
    k = flag_count(n, contamination=contamination, top_k=top_k)
    key_name = source.spec.id_column or "row"
    key_col = pa.chunked_array(keys) if keys else None
    bar = Progress(f"writing {output.name}", total=n, enabled=progress)
    writer = None
    try:
        for start in range(0, n, WRITE_ROWS):
            stop = min(start + WRITE_ROWS, n)
            cols = {
                key_name: key_col.slice(start, stop - start)
                if key_col is not None
                else pa.array(np.arange(start + 1, stop + 1)),
                **{f"score_{name}": pa.array(s[start:stop]) for name, s in scores.items()},
                "outlier_score": pa.array(combined[start:stop]),
                "rank": pa.array(rank[start:stop]),
                "outlier": pa.array(rank[start:stop] <= k),
                **{col: pa.array(v[start:stop]) for col, v in cohort_cols.items()},
            }
            table = pa.table(cols)
            if writer is None:
                writer = (pq.ParquetWriter(output, table.schema) if parquet
                          else pacsv.CSVWriter(output, table.schema))
            writer.write_table(table)
            bar.update(stop - start)
    finally:
        if writer is not None:
            writer.close()
    bar.close()
    return ScoreSummary(rows=n, flagged=k, output=str(output), clipped=source.report.clipped_total)
