"""Score local records with the global model's detectors and write the results.

Two passes with bounded memory: the data file is read chunk by chunk and every detector's
``decision_function`` (higher = more outlying) is kept per record (8 bytes per record and
detector); then the per-detector scores are turned into rank percentiles, combined, ranked,
and written chunk by chunk to CSV or Parquet.

Combined score: the mean over detectors of each record's rank percentile
(average rank of ties, as ``scipy.stats.rankdata(scores, "average")``, divided by ``n``; in
``(0, 1]``, 1 = most outlying of the local file; computed with numpy, not scipy, whose import
alone took 0.55 s of every ``score`` run),
so detectors on different scales count equally. ``rank`` is 1 for the most outlying record;
``outlier`` flags the ``top_k`` records, or ``ceil(contamination * n)`` of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from numpy.typing import NDArray

from participant.cohort_columns import Cohorts
from participant.data import DataSource
from participant.dataset import DatasetSource
from participant.progress import Progress

WRITE_ROWS = 262_144


class Detector(Protocol):
    def decision_function(self, X: NDArray[np.float64]) -> NDArray[np.float64]: ...


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


def average_ranks(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """1-based ranks, ties sharing the mean of their ranks (``rankdata(x, "average")``)."""
    order = np.argsort(x, kind="stable")
    ordered = x[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], x.size]
    ranks = np.empty(x.size, dtype=np.float64)
    ranks[order] = np.repeat((starts + 1 + ends) / 2.0, ends - starts)
    return ranks


def combine(
    scores: Mapping[str, NDArray[np.float64]],
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """Mean rank percentile over detectors, and the 1-based rank (1 = most outlying)."""
    n = len(next(iter(scores.values())))
    combined = np.zeros(n, dtype=np.float64)
    for s in scores.values():
        combined += average_ranks(s) / n
    combined /= len(scores)
    order = np.argsort(-combined, kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(1, n + 1)
    return combined, rank


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
    cohorts: Cohorts | None = None,
) -> ScoreSummary:
    """Score every record of ``source`` with each detector and write ``output`` (with each
    record's released cohort and distance to its centre when ``cohorts`` is given)."""
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
    combined, rank = combine(scores)
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
