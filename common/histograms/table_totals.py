"""Table totals agree, except saturated tables: the check shared by every LSH release bound.

A record falls in exactly one cell of every LSH table (and of a dense grid: out-of-range
values are clipped to the edge bins), so every table's exact total is the record count and
noisy totals differ only by their noise. Each cell is clipped at the public record bound
``R`` (``aggregation.max_records``) before the noise; clipping only lowers a total, and only in
a table holding a cell of at least ``R - B`` after noise (``B`` the cell's noise tail). Such a
table is *saturated*: its total may fall short of the others', never exceed them by more than
the noise tail. :func:`outside_tail` states that rule once; the independent release bounds
(:mod:`common.histograms.release_bounds`) and the revealed secure sum (:mod:`common.secagg.checks`)
pick the reference total and the tail their noise calls for. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

__all__ = ["exact_totals", "outside_tail", "saturated_tables", "table_spans"]

Span = tuple[int, int]
Exact = int | Fraction


def table_spans(offsets: NDArray[np.int64]) -> tuple[Span, ...]:
    """``(start, stop)`` of each table in the flat LSH vector, from the family's offsets."""
    edges = [int(v) for v in offsets]
    return tuple(zip(edges[:-1], edges[1:], strict=True))


def exact_totals(values: NDArray[np.int64], spans: Sequence[Span]) -> list[int]:
    """Each table's total as a Python int (exact: no int64 overflow however many cells)."""
    big = values.astype(object)
    return [int(big[a:b].sum()) for a, b in spans]


def saturated_tables(values: NDArray[np.int64], starts: NDArray[np.int64], floor: int
                     ) -> NDArray[np.bool_]:
    """Per table (tables start at ``starts``, none empty): does a cell reach ``floor``
    (``R - B``, where a clipped count may be)?"""
    return np.asarray(np.maximum.reduceat(values, starts) >= floor, dtype=np.bool_)


def outside_tail(total: Exact, reference: Exact, tail: Exact, saturated: bool) -> bool:
    """Whether ``total`` disagrees with the ``reference`` total it must match within ``tail``:
    it exceeds it by more, or, when its table is not saturated, falls short by more (exact)."""
    above = total - reference
    return above > tail or (not saturated and -above > tail)
