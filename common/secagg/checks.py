"""Is a revealed secure sum one that honest members could have produced? (pure: no I/O)

Masking hides every member's vector, so nothing checks a vector before it is summed, and a
member can add anything to its own (a +50,000 poke arrives as ``50,000 mod 2**k``). The sum is
checked against the public structure of the vector (:mod:`common.secagg.vector`: the LSH
tables, then the dense grid) before it is merged; a sum that fails is not merged and the round
ends ``rejected`` (:mod:`coordinator.services.secagg.rounds`).

What an honest sum of ``r`` members looks like (``M = max_records``, the noise of a cell is
``r`` Pólya shares, ``NB(r/h_min) - NB(r/h_min)``):

1. **Every cell in range**: ``[-B, r M + B]``, ``B`` the tail of ``ceil(r / h_min)`` discrete
   Laplace draws of the part's scale (:func:`common.noise.tails.laplace_tail`), union-bounded
   over every cell of the vector.
2. **LSH tables agree**: a member puts each record in exactly one cell of *every* table, so
   its exact table totals are all equal to its record count. Clipping each cell at ``M`` breaks
   that only in a table where one of the member's cells held more than ``M`` records, and such
   a table then holds a revealed cell of at least ``M - B`` (the member's clipped ``M`` plus
   the others' non-negative counts plus noise). Clipping only lowers a total. Hence, calling a
   table *saturated* when a cell reaches ``M - B``: no table's total exceeds the mean of the
   other unsaturated tables' totals by more than the noise tail (its own total's noise plus
   that mean's, :func:`common.noise.tails.polya_sum_tail`), and no unsaturated table falls
   short of it by more either.
3. **The dense grid agrees with the LSH tables**: the grid too puts every record in exactly one
   cell (out-of-range values and projections are clipped to the edge bins, never dropped), so
   its total exceeds the unsaturated LSH tables' mean total by at most the noise tail (the
   grid's total noise plus that mean's), and falls short of it by no more if the grid is
   unsaturated.

The tails split ``beta = 2**-40``: a quarter over the cells, a quarter over the LSH totals
(each table's own, the sum of the others it is compared with, the sum the grid is compared
with), an eighth to the grid's total. An honest sum is rejected with probability at most
``2**-40`` (no matter how the records are spread; the counts are integers, only the noise is
random).

What cannot be caught (no aggregation can without proofs of input validity, Prio-style):
a member moving mass inside a table (the totals do not change), a member poking every table
and the grid by the same amount (a consistent lie about its record count), a poke smaller
than the noise tail, and an upward poke when every table is saturated (no unclipped total is
left to compare with). A downward poke is caught only in an unsaturated table.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from common.errors import SecureSumRejected
from common.histograms.table_totals import exact_totals, outside_tail, saturated_tables, table_spans
from common.noise.scale import laplace_scale
from common.noise.tails import FAILURE_PROBABILITY, laplace_tail, polya_sum_tail
from common.secagg.vector import SecureStudy, secure_parts

__all__ = ["check_secure_sum", "SumBounds", "sum_bounds"]

_NEXT = ("The sum is not merged and the model keeps its last value; the members were charged "
         "for their release. Open the next round; if sums keep being rejected, one member's "
         "software or data is not honest: run rounds with subsets of the cohort to find it.")


class SumBounds:
    """The public bounds a revealed sum of ``members`` vectors must meet (see the module)."""

    def __init__(self, config: SecureStudy, members: int, beta: float) -> None:
        params = config.aggregation
        if params is None or params.h_min is None:
            raise ValueError(f"study {config.study_id} does not use secure aggregation")
        if members < 1:
            raise ValueError(f"a sum has at least one member, got {members}")
        self.members, self.max_records = members, params.max_records
        per_cell = Fraction(members, params.h_min)
        parts = secure_parts(config)
        cells = sum(c for _, c, _, _ in parts)
        self.scale = {name: laplace_scale(sens, eps) for name, _, sens, eps in parts}
        self.cell_tail = {
            name: laplace_tail(s, draws=math.ceil(per_cell), beta=beta / 4 / cells)
            for name, s in self.scale.items()
        }
        self.starts = config.lsh_family().offsets[:-1]
        self.tables = list(table_spans(config.lsh_family().offsets))
        self._per_cell, self._beta = per_cell, beta
        self.grid_tail = 0
        if "grid" in self.scale:
            self.grid_tail = polya_sum_tail(
                self.scale["grid"], config.grid_cells * per_cell, beta=beta / 8)

    @functools.cache  # noqa: B019 - one SumBounds per check, a few distinct sizes
    def lsh_tail(self, cells: int) -> int:
        """Tail of the total noise of ``cells`` LSH cells. At most ``2 * tables + 1`` such
        totals are bounded per sum, each at ``beta / (4 * (tables + 1))``."""
        return polya_sum_tail(self.scale["lsh"], cells * self._per_cell,
                              beta=self._beta / 4 / (len(self.tables) + 1))

    def cell_range(self, part: str) -> tuple[int, int]:
        b = self.cell_tail[part]
        return -b, self.members * self.max_records + b

    def saturated_from(self, part: str) -> int:
        """A cell at or above this may hold a member's clipped count."""
        return self.max_records - self.cell_tail[part]


def sum_bounds(config: SecureStudy, members: int, beta: float = FAILURE_PROBABILITY
               ) -> SumBounds:
    return SumBounds(config, members, beta)


def _reject(reason: str, **context: object) -> SecureSumRejected:
    return SecureSumRejected(f"{reason}. {_NEXT}", **context)


def _check_range(bounds: SumBounds, name: str, values: NDArray[np.int64], start: int) -> None:
    lo, hi = bounds.cell_range(name)
    bad = np.flatnonzero((values < lo) | (values > hi))
    if bad.size:
        cell = int(bad[0])
        raise _reject(
            f"revealed sum rejected: {name} cell {cell} (vector cell {start + cell}) holds "
            f"{int(values[cell])}, outside [{lo}, {hi}] = [-B, r * max_records + B] with "
            f"r = {bounds.members} members, max_records {bounds.max_records} and noise tail "
            f"B = {hi - bounds.members * bounds.max_records} at 2^-40 ({bad.size} cells out of "
            "range)", cell=start + cell, value=int(values[cell]), low=lo, high=hi)


def _check_tables(bounds: SumBounds, lsh: NDArray[np.int64]) -> list[tuple[int, int]]:
    """Each table's total against the mean of the other unsaturated tables (|noise| within the
    tail of its own total plus the tail of the others' summed total over their number).
    Returns ``(total, cells)`` of the unsaturated tables."""
    totals = exact_totals(lsh, bounds.tables)
    sizes = [b - a for a, b in bounds.tables]
    saturated = saturated_tables(lsh, bounds.starts, bounds.saturated_from("lsh"))
    free = [j for j in range(len(totals)) if not saturated[j]]
    for j, own in enumerate(totals):
        others = [i for i in free if i != j]
        if not others:
            continue
        mean, tail = _mean_and_tail(bounds, [(totals[i], sizes[i]) for i in others])
        tail += bounds.lsh_tail(sizes[j])
        if outside_tail(own, mean, tail, bool(saturated[j])):
            raise _reject(
                f"revealed sum rejected: LSH table {j} totals {own} but the other tables with "
                f"no cell near max_records (nothing clipped) total {float(mean):.1f} on "
                f"average; every record is in one cell of every table, so an honest total "
                f"differs from that by at most the noise tail {float(tail):.1f} at 2^-40, "
                f"not {float(own - mean):+.1f}",
                table=j, total=own, others_mean=float(mean), tail=float(tail))
    return [(totals[j], sizes[j]) for j in free]


def _mean_and_tail(bounds: SumBounds, tables: list[tuple[int, int]]) -> tuple[Fraction, Fraction]:
    """Mean total of unclipped tables ``(total, cells)`` and the tail of its noise."""
    count = len(tables)
    mean = Fraction(sum(t for t, _ in tables), count)
    return mean, Fraction(bounds.lsh_tail(sum(c for _, c in tables)), count)


def _check_grid(bounds: SumBounds, grid: NDArray[np.int64], free: list[tuple[int, int]]
                ) -> None:
    """The grid's total against the unsaturated LSH tables' mean total."""
    if not free:
        return
    total = int(grid.astype(object).sum())
    grid_clipped = bool(np.any(grid >= bounds.saturated_from("grid")))
    mean, tail = _mean_and_tail(bounds, free)
    tail += bounds.grid_tail
    if outside_tail(total, mean, tail, grid_clipped):
        raise _reject(
            f"revealed sum rejected: the grid totals {total} but the LSH tables with no cell "
            f"near max_records total {float(mean):.1f} on average; every record is in one grid "
            f"cell and one cell of every table, so honest totals differ by at most the noise "
            f"tail {float(tail):.1f} at 2^-40", total=total, lsh_mean=float(mean),
            tail=float(tail))


def check_secure_sum(
    config: SecureStudy, total: NDArray[np.int64], members: int,
    *, beta: float = FAILURE_PROBABILITY,
) -> None:
    """Raise :class:`~common.errors.SecureSumRejected` (reason in ``.message``) if the revealed
    sum of ``members`` vectors is not one honest members produce (module docstring); an honest
    sum is refused with probability at most ``beta`` (``2**-40``)."""
    bounds = sum_bounds(config, members, beta)
    values = np.asarray(total, dtype=np.int64)
    if values.shape != (config.secure_cells,):
        raise _reject(f"revealed sum rejected: {values.shape} cells, the study's secure vector "
                      f"has {config.secure_cells}")
    start = 0
    for name, cells, _, _ in secure_parts(config):
        _check_range(bounds, name, values[start:start + cells], start)
        start += cells
    lsh = values[: config.lsh_cells]
    free = _check_tables(bounds, lsh)
    if config.grid is not None:
        _check_grid(bounds, values[config.lsh_cells:], free)
