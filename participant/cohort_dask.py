"""A cohort round's exact vector on a Dask cluster: one task per partition (file), summed.

Same vector as the in-process loop of :mod:`participant.cohorts` (exact integer arithmetic,
so byte-identical): each worker streams its file in chunks through the protocol's ``exact``;
only the per-partition integer vectors come back, never a record.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from common.cohorts.protocol import CohortState, RoundProtocol
from participant.data import DataSource, DataSpec
from participant.engine_dask import Source, _files, dask_client, first_error


def partition_vector(file: Path, spec: DataSpec, chunk_rows: int, protocol: RoundProtocol,
                     state: CohortState) -> NDArray[np.int64]:
    """The exact vector of one partition (runs on a worker)."""
    total = np.zeros(protocol.size(state), dtype=np.int64)
    for chunk in DataSource(file, spec, chunk_rows=chunk_rows):
        total += protocol.exact(state, chunk.X)
    return total


def exact_vector(source: Source, protocol: RoundProtocol, state: CohortState, *,
                 scheduler: str | None = None) -> NDArray[np.int64]:
    """Sum of every partition's exact vector; the first failing partition's error is raised."""
    with dask_client(scheduler) as client:
        parts = client.map(partition_vector, _files(source), spec=source.spec,
                           chunk_rows=source.chunk_rows, protocol=protocol, state=state,
                           pure=False)
        first_error(parts, f"cohort vector of {Path(source.path).name}", source.progress)
        vectors: list[NDArray[np.int64]] = client.gather(parts)  # type: ignore[no-untyped-call]
    total = np.zeros(protocol.size(state), dtype=np.int64)
    for vector in vectors:
        total += vector
    return total
