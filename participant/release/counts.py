"""The exact local histograms under their former address: they live in
:mod:`participant.data.counts`, below every engine that counts (in process and Dask)."""

from participant.data.counts import (
    ExactCounts,
    Rows,
    empty_counts,
    exact_histograms,
    note_malformed,
)

__all__ = ["ExactCounts", "Rows", "empty_counts", "exact_histograms", "note_malformed"]
