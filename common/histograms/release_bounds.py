"""Poisoning bounds of independent LSH and grid releases: what an honest release can hold,
from public parameters only. Pure: no I/O, no clock.

An honest participant releases exact counts plus discrete Laplace noise
(:mod:`common.histograms.release`). With ``R = aggregation.max_records`` (the public per-participant
record bound per cell, default ``10**6``; :class:`common.secagg.params.AggregationParams`)
and a noise tail ``B`` (:func:`common.noise.tails.laplace_tail`, union-bounded over every
cell of the release at ``beta / 2``):

1. **LSH and dense grid cells** lie in ``[-B, R + B]`` (exact counts are in ``[0, R]``).
2. **Sparse (thresholded) grid cells** lie in ``[T, R + B]``: the thresholded mechanism only
   keeps a noisy count ``>= T`` (:func:`common.noise.laplace.make_threshold_noise`, public ``T``).
   The union bound runs over ``2**62`` cells (any number of occupied cells a body can hold).
3. **LSH tables agree**: a record falls in exactly one cell of every table, so every table's
   exact total is the participant's record count ``X``. The noisy total of table ``t`` is
   ``X + N_t`` with ``N_t`` the sum of its ``c_t`` cells' noise, ``|N_t| <= b_t`` with
   probability ``1 - beta / (2 tables)`` each (:func:`common.noise.tails.polya_sum_tail`:
   discrete Laplace is ``NB(1) - NB(1)``). An honest release therefore has some ``X`` with
   ``|total_t - X| <= b_t`` for every table: ``max(total_t - b_t) <= min(total_t + b_t)``.
   A table holding a cell at or above ``R - B`` (*saturated*: a count clipped at ``R`` would
   be there) is only held to the upper side (clipping only lowers a total). A dense grid is
   one more such table (every record is in exactly one of its cells: out-of-range values are
   clipped to the edge bins).

An honest release fails any of these with probability below ``beta`` (``2**-40``).

**The noise scale.** LSH noise has scale ``n_tables * N / epsilon_lsh`` and a dense grid's
``N / epsilon_grid``, ``N`` the participant's ``--rows-per-id`` (1 without it). ``N`` is a
local option, not in the signed config, so the bounds assume the largest
:data:`MAX_ROWS_PER_ID` (a sparse grid is only released with ``N = 1``). A participant
releasing with a larger ``N`` is refused here: ``participant.release.policy`` should refuse such an
``N`` before anything is charged.

**What cannot be caught** (no aggregation can without proofs of input validity, Prio-style):
mass moved between cells of a table (totals unchanged), every table and the grid shifted by
the same amount (a consistent lie about the record count, up to ``R`` per cell), changes
below the noise tail, and an upward shift of a saturated table.

**Sums cannot wrap.** Every accepted cell has ``|v| <= R + B``; the model is a sum of one
release per contributor (a replacement subtracts the release it replaces), so a model cell is
at most ``contributors * (R + B)``, which fits int64 for up to :attr:`ReleaseBounds.
max_contributors` contributors (``2**22`` at the largest ``R = 2**40`` and any tail below
``2**40``); the fold's :func:`common.histograms.merge.merge_sum` raises rather than wraps past that.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from common.errors import ReleaseOutOfBounds
from common.histograms.table_totals import exact_totals, outside_tail, saturated_tables, table_spans
from common.noise.scale import grid_sensitivity, laplace_scale, lsh_sensitivity
from common.noise.tails import FAILURE_PROBABILITY, laplace_tail, polya_sum_tail
from common.secagg.params import AggregationParams
from common.study.config import StudyConfig

__all__ = ["MAX_ROWS_PER_ID", "ReleaseBounds", "release_bounds", "check_lsh", "check_grid"]

MAX_ROWS_PER_ID = 16
"""Largest ``--rows-per-id`` the bounds allow for: the noise scale grows with it."""
_SPARSE_UNION = 2**62
_I64_MAX = 2**63 - 1


def _scale(sensitivity: int, epsilon: Decimal) -> float:
    """The noise scale the bounds are drawn for: at least the float scale the mechanism
    used. :func:`common.noise.scale.laplace_scale` to the nearest float, inflated by
    ``1e-12``: the mechanism rounds the same quotient up and may nudge it a few ulps further
    until OpenDP's map fits epsilon (``common.noise.laplace``). It only sizes the acceptance
    tails (which compute in float, with slack), never the noise drawn or the epsilon charged."""
    return float(laplace_scale(sensitivity, epsilon)) * (1 + 1e-12)


@lru_cache(maxsize=16)
def _threshold(epsilon: Decimal, delta: Decimal) -> int:
    from common.noise.laplace import make_threshold_noise  # OpenDP: imported only when needed

    return make_threshold_noise(epsilon, delta)[1]


@lru_cache(maxsize=256)
def _sum_tail(scale: float, cells: int, beta: float) -> int:
    """:func:`polya_sum_tail` of ``cells`` discrete Laplace draws (tables share sizes)."""
    return polya_sum_tail(scale, cells, beta=beta)


@dataclass(frozen=True)
class ReleaseBounds:
    """The public bounds of one study config's releases (module docstring)."""

    max_records: int
    lsh_scale: float
    lsh_tail: int
    tables: tuple[tuple[int, int], ...]
    table_tails: tuple[int, ...]
    starts: NDArray[np.int64]
    tail_array: NDArray[np.int64]
    grid_layout: str | None
    grid_scale: float
    grid_tail: int
    grid_total_tail: int
    threshold: int
    beta: float

    @property
    def max_cell(self) -> int:
        """The largest magnitude of an accepted cell."""
        return self.max_records + max(self.lsh_tail, self.grid_tail)

    @property
    def max_contributors(self) -> int:
        """Contributors whose releases at the bound still sum within int64."""
        return _I64_MAX // self.max_cell


_cache: dict[tuple[str, int, str, float], ReleaseBounds] = {}


def release_bounds(config: StudyConfig, beta: float = FAILURE_PROBABILITY) -> ReleaseBounds:
    """The bounds of ``config``'s releases at failure probability ``beta`` (kept per study,
    config version and seed: a signed config version never changes)."""
    key = (config.study_id, config.version, config.lsh.seed, beta)
    found = _cache.get(key)
    if found is None:
        if len(_cache) >= 64:
            _cache.clear()
        found = _cache[key] = _bounds(config, beta)
    return found


def _bounds(config: StudyConfig, beta: float) -> ReleaseBounds:
    p = config.privacy
    records = (config.aggregation or AggregationParams()).max_records
    n_tables = config.lsh.n_tables
    lsh_scale = _scale(lsh_sensitivity(n_tables, MAX_ROWS_PER_ID), p.epsilon_lsh)
    dense_cells = config.lsh_cells + (config.grid_cells if config.grid_layout == "dense" else 0)
    union = dense_cells + (_SPARSE_UNION if config.grid_layout == "sparse" else 0)
    tables = table_spans(config.lsh_family().offsets)
    per_total = beta / 2 / (len(tables) + 1)
    grid_scale, grid_tail, grid_total_tail, threshold = 0.0, 0, 0, 0
    if config.grid_layout == "dense":
        grid_scale = _scale(grid_sensitivity(MAX_ROWS_PER_ID), p.epsilon_grid)
        grid_tail = laplace_tail(grid_scale, beta=beta / 2 / union)
        grid_total_tail = polya_sum_tail(grid_scale, config.grid_cells, beta=per_total)
    elif config.grid_layout == "sparse":
        grid_scale = _scale(grid_sensitivity(), p.epsilon_grid)
        grid_tail = laplace_tail(grid_scale, beta=beta / 2 / union)
        threshold = _threshold(p.epsilon_grid, p.delta_grid)
    table_tails = tuple(_sum_tail(lsh_scale, b - a, per_total) for a, b in tables)
    return ReleaseBounds(
        max_records=records, lsh_scale=lsh_scale,
        lsh_tail=laplace_tail(lsh_scale, beta=beta / 2 / union),
        tables=tables, starts=np.array([a for a, _ in tables], dtype=np.int64),
        tail_array=np.array(table_tails, dtype=np.int64),
        table_tails=table_tails,
        grid_layout=config.grid_layout, grid_scale=grid_scale, grid_tail=grid_tail,
        grid_total_tail=grid_total_tail, threshold=threshold, beta=beta)


def _refuse(what: str, cell: int, value: int, low: int, high: int, why: str
            ) -> ReleaseOutOfBounds:
    return ReleaseOutOfBounds(
        f"{what} is {value}; the public bound is [{low}, {high}] ({why}). An honest release "
        "falls outside it with probability below 2^-40; nothing was stored or charged",
        cell=cell, value=value, low=low, high=high)


def _check_cells(values: NDArray[np.int64], low: int, high: int, name: str, why: str,
                 bounds: ReleaseBounds) -> None:
    if not values.size:
        return
    if int(values.min()) >= low and int(values.max()) <= high:
        return
    cell = int(np.flatnonzero((values < low) | (values > high))[0])
    if name == "lsh":
        table = next(t for t, (a, b) in enumerate(bounds.tables) if a <= cell < b)
        what = f"cell {cell - bounds.tables[table][0]} of LSH table {table} (vector cell {cell})"
    else:
        what = f"grid value {cell}"
    raise _refuse(what, cell, int(values[cell]), low, high, why)


def _fits(values: NDArray[np.int64]) -> bool:
    """Whether every partial sum of ``values`` (and a tail on top) stays within int64."""
    return values.size * int(np.abs(values).max(initial=0)) < 2**61


def _totals(values: NDArray[np.int64], bounds: ReleaseBounds, exact: bool) -> NDArray[Any]:
    """Each table's total: int64, or exact Python ints when a sum might leave int64."""
    if not exact:
        return np.add.reduceat(values, bounds.starts)
    return np.array(exact_totals(values, bounds.tables), dtype=object)


def check_lsh(bounds: ReleaseBounds, values: NDArray[np.int64],
              grid: NDArray[np.int64] | None = None) -> None:
    """Refuse an LSH vector (and a dense grid's values) outside rules 1 and 3."""
    r, b = bounds.max_records, bounds.lsh_tail
    _check_cells(values, -b, r + b, "lsh",
                 f"[-B, max_records + B], max_records {r}, discrete Laplace tail B = {b} of "
                 f"scale {bounds.lsh_scale:.6g} = n_tables x {MAX_ROWS_PER_ID} rows per id / "
                 "epsilon_lsh", bounds)
    dense = grid is not None and bounds.grid_layout == "dense"
    exact = not _fits(values) or (grid is not None and dense and not _fits(grid))
    totals, tails = _totals(values, bounds, exact), bounds.tail_array
    saturated = saturated_tables(values, bounds.starts, r - b)
    tables = totals.size
    if grid is not None and dense:
        grid_total = grid.astype(object).sum() if exact else grid.sum()
        totals = np.append(totals, np.array([grid_total], dtype=totals.dtype))
        tails = np.append(tails, bounds.grid_total_tail)
        saturated = np.append(saturated, int(grid.max(initial=0)) >= r - bounds.grid_tail)
    _check_totals(totals, tails, saturated,
                  lambda i: f"LSH table {i}" if i < tables else "the dense grid")


def _check_totals(totals: NDArray[Any], tails: NDArray[np.int64], saturated: NDArray[np.bool_],
                  names: Callable[[int], str]) -> None:
    """Some record count ``X`` must be within every unsaturated table's tail of its total,
    and no saturated table may exceed ``X`` by more than its tail."""
    if saturated.all():
        return
    upper, lower = totals + tails, totals - tails
    free = np.flatnonzero(~saturated)  # X <= upper[hi], over the unsaturated tables only
    hi = int(free[np.argmin(upper[free])])  # (a tie must never pick a saturated table)
    lo = int(np.argmax(lower))  # X >= lower[lo]
    first, second = int(totals[lo]), int(totals[hi])
    bound = int(tails[lo]) + int(tails[hi])
    # X exists iff lower[lo] <= upper[hi], i.e. table lo's total is within the two tails of
    # unsaturated table hi's (it cannot fall short by more: lower[lo] is the largest)
    if not outside_tail(first, second, bound, bool(saturated[lo])):
        return
    raise ReleaseOutOfBounds(
        f"{names(lo)}'s total {first} and {names(hi)}'s total {second} differ by "
        f"{first - second}; the public bound is {bound} (every record is in exactly one cell "
        "of every table, so honest totals differ only by their noise: the tails of the two "
        "totals' noise sums at 2^-40). Nothing was stored or charged", first=names(lo),
        second=names(hi), difference=first - second, bound=bound)


def check_grid(bounds: ReleaseBounds, values: NDArray[np.int64]) -> None:
    """Refuse grid values outside rule 1 (dense) or rule 2 (sparse)."""
    r, b = bounds.max_records, bounds.grid_tail
    if bounds.grid_layout == "sparse":
        _check_cells(values, bounds.threshold, r + b, "grid",
                     f"[T, max_records + B]: the thresholded release keeps only noisy counts "
                     f">= T = {bounds.threshold}; max_records {r}, tail B = {b} of scale "
                     f"{bounds.grid_scale:.6g} = 1 / epsilon_grid", bounds)
    else:
        _check_cells(values, -b, r + b, "grid",
                     f"[-B, max_records + B], max_records {r}, discrete Laplace tail B = {b} "
                     f"of scale {bounds.grid_scale:.6g} = {MAX_ROWS_PER_ID} rows per id / "
                     "epsilon_grid", bounds)

