"""Exact local histograms of a checked source: the LSH tables and the grid, chunk by chunk.

They never leave the machine; only their noisy release does (:mod:`participant.release.contribute`
and the secure and cohort rounds draw the noise). Every kind of release counts through here,
in process or on Dask (:mod:`participant.dask.engine` sums the same per-partition counts).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from common.histograms.grid import GridSpec
from common.histograms.hashing import LSHFamily
from common.histograms.merge import merge_sparse
from common.study.config import StudyConfig

log = logging.getLogger("fedod.participant")


class Rows(Protocol):
    """A chunk of checked, clipped records (:class:`participant.data.spec.Chunk`)."""

    @property
    def X(self) -> NDArray[np.float64]: ...  # noqa: N802 - the records matrix, as in Chunk


@dataclass
class ExactCounts:
    """Exact local histograms: never leave the machine, only their noisy release does."""

    lsh: NDArray[np.int64]
    grid_dense: NDArray[np.int64] | None = None
    grid_cells: NDArray[np.int64] | None = None
    grid_counts: NDArray[np.int64] | None = None


def exact_histograms(
    source: Iterable[Rows], family: LSHFamily, grid: GridSpec | None, *, dense_grid: bool
) -> ExactCounts:
    """Histograms are additive: accumulate them chunk by chunk with bounded memory."""
    out = ExactCounts(lsh=np.zeros(family.n_cells, dtype=np.int64))
    if grid is not None and dense_grid:
        out.grid_dense = np.zeros(grid.n_cells, dtype=np.int64)
    elif grid is not None:
        out.grid_cells = np.empty(0, dtype=np.int64)
        out.grid_counts = np.empty(0, dtype=np.int64)
    for chunk in source:
        out.lsh += family.histogram(chunk.X)
        if out.grid_dense is not None:
            out.grid_dense += grid.dense_counts(chunk.X)  # type: ignore[union-attr]
        elif grid is not None:
            out.grid_cells, out.grid_counts = merge_sparse(
                out.grid_cells, out.grid_counts, *grid.occupied(chunk.X)  # type: ignore[arg-type]
            )
    note_malformed(source)
    return out


def note_malformed(source: object) -> None:
    """Say locally how many malformed rows the release dropped (never sent)."""
    report = getattr(source, "report", None)
    if report is not None and (note := report.malformed_note()):
        log.warning("%s", note)


def empty_counts(config: StudyConfig) -> ExactCounts:
    """Exact histograms of an empty dataset: a noise-only release has the same shape."""
    out = ExactCounts(lsh=np.zeros(config.lsh_cells, dtype=np.int64))
    if config.grid_layout == "dense":
        out.grid_dense = np.zeros(config.grid_cells, dtype=np.int64)
    elif config.grid_layout == "sparse":
        out.grid_cells = np.empty(0, dtype=np.int64)
        out.grid_counts = np.empty(0, dtype=np.int64)
    return out
