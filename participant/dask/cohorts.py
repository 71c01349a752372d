"""A cohort round's exact vector on a Dask cluster: one task per partition (file), summed.

Same vector as the in-process loop of :mod:`participant.cohorts.rounds` (exact integer arithmetic,
so byte-identical): each worker streams its file in chunks through the protocol's ``exact``;
only the per-partition integer vectors and local reports (counts of malformed rows dropped
and values clipped, summed on the client, never sent) come back, never a record.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from common.cohorts.protocol import CohortState, RoundProtocol
from participant.dask.engine import Source, dask_client, first_error, source_files
from participant.data.dataset import merge_reports
from participant.data.reader import DataReport, DataSource, DataSpec


def partition_vector(file: Path, spec: DataSpec, chunk_rows: int, protocol: RoundProtocol,
                     state: CohortState) -> tuple[NDArray[np.int64], DataReport]:
    """The exact vector of one partition and its local report (runs on a worker)."""
    total = np.zeros(protocol.size(state), dtype=np.int64)
    source = DataSource(file, spec, chunk_rows=chunk_rows)
    for chunk in source:
        total += protocol.exact(state, chunk.X)
    return total, source.report


def exact_vector(source: Source, protocol: RoundProtocol, state: CohortState, *,
                 scheduler: str | None = None) -> NDArray[np.int64]:
    """Sum of every partition's exact vector; the first failing partition's error is raised.
    Sets ``source.report`` (malformed rows dropped and clipped values, summed here, local)."""
    with dask_client(scheduler) as client:
        parts = client.map(partition_vector, source_files(source), spec=source.spec,
                           chunk_rows=source.chunk_rows, protocol=protocol, state=state,
                           pure=False)
        first_error(parts, f"cohort vector of {Path(source.path).name}", source.progress)
        results: list[tuple[NDArray[np.int64], DataReport]] = client.gather(  # type: ignore[no-untyped-call]
            parts)
    total = np.zeros(protocol.size(state), dtype=np.int64)
    for vector, _ in results:
        total += vector
    source.report = merge_reports(str(source.path), [report for _, report in results])
    return total
