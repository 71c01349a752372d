"""Public parameter rules for the detectors: chosen from public inputs, never from data.

Every function here takes only what an administrator declares before any record is seen
-- the number of features ``d``, the *declared* expected records per participant, the cohort
size ``p``, the per-release ``epsilon`` (and ``delta``), the aggregation mode (and ``h_min``)
-- and no array, so no participant's data, row count or statistic can enter. The same public
inputs always give the same parameters (``tests/common/test_rules.py``).

LSH iTables (:func:`lsh_rule`)
------------------------------
The merged model of ``N = p * expected`` records carries ``k`` discrete Laplace draws of scale
``m / epsilon`` per cell (:func:`common.noise.planning.noise_draws`: ``p`` independent,
``p / h_min`` secure). :mod:`common.noise.planning` divides the records evenly over all
``C(s)`` cells of a table; real records concentrate in far fewer cells (clusters, correlated
features), and measured over the shared ODDS sets and synthetic mixtures (BENCHMARKS.md,
"Parameter rules") the AUC holds up to far lower SNRs than that even fill predicts. The rule
therefore uses the *occupied-cell* SNR, with ``sqrt(C(s))`` cells holding the records:

    Z_eff(m, s) = N epsilon / (sqrt(C(s)) sqrt(2 k m))

and takes the deepest tables (largest ``s`` in :data:`SIZES`, at most the paper's 1000: depth
is what makes the model fine) that keep ``Z_eff >= LSH_TARGET`` with at least
:data:`TABLES`\\ ``[-1]`` tables, then the most tables of :data:`TABLES` that keep it. Where
the target holds the cells stand clear of the noise and the paper's ``log`` scoring (of the
total-consistent counts) ranks better than the linear ``mass``; until ``Z_eff`` reaches
:data:`LOG_ALL_TABLES` it is used with at most :data:`LOG_TABLES` tables (fewer, less noisy
tables suit the logarithm). Where even the smallest tables miss the target: ``mass`` scoring,
which averages the noise out. With no noise (``epsilon=None``) it returns the paper's
``m = 100, s = 1000`` and ``log``.

Grid k-NN (:func:`grid_rule`)
-----------------------------
A uniform grid on public bounds is only informative when the walk of Algorithm 1 separates
records: with few bins and many records every inlier has ``k`` neighbours in its own cell
(scores tie at 0), with many dimensions every record is alone (scores tie at the maximum).
The rule fixes the resolution and scales ``k`` with the declared records: at most
:data:`GRID_DIMS_MAX` grid dimensions (the features themselves, or :data:`GRID_PROJECTION`
seed-derived random projections of them when ``d`` is larger), :data:`GRID_BINS` bins,
``k = max(10, N / 100)`` and depth 3. A private grid stays dense (at most ``cell_limit``
cells, so 6 dimensions at 8 bins and the default limit): a sparse release would threshold
away every cell below about ``log(1/delta)/epsilon`` records. Under noise it also reports
the grid's expected score SNR (:class:`common.detectors.combine.DetectorPlan`) and
``use = False`` when the grid would be noise-dominated: ``study create`` then logs a warning
advising to leave the grid out (a requested grid is kept), and the combined score gives it
almost no weight (the same SNR).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from common.noise.planning import Mode, noise_draws, occupied_snr

SIZES = (1000, 512, 256, 128, 64, 32, 16, 8, 4)
"""Table sizes ``s`` the LSH rule picks from, deepest first (the paper's 1000 at most)."""
TABLES = (100, 50, 30, 20, 10, 5)
"""Table counts ``m`` the LSH rule picks from, most first."""
LSH_TARGET = 1.0
"""Occupied-cell score SNR the LSH rule keeps (module docstring)."""
LOG_TABLES, LOG_ALL_TABLES = 20, 10.0
"""``log`` scoring uses at most 20 tables while ``Z_eff`` is below 10."""
PAPER_TABLES, PAPER_SIZE = 100, 1000

GRID_BINS = 8
GRID_DIMS_MAX = 10
GRID_PROJECTION = 6
GRID_K_MIN, GRID_K_SHARE, GRID_DEPTH = 10, 100, 3
GRID_MIN_SNR = 0.1
"""Below this expected score SNR the grid is judged not worth its epsilon (``use = False``)."""


@dataclass(frozen=True)
class LSHChoice:
    """Table count ``m``, table size ``s``, cell scoring and the occupied-cell SNR they give
    (inf: exact)."""

    n_tables: int
    sample_size: int
    snr: float
    scoring: Literal["log", "mass"]


@dataclass(frozen=True)
class GridChoice:
    """Grid parameters: ``projection`` is ``None`` for the features themselves."""

    bins: int
    projection: int | None
    k: int
    max_depth: int
    snr: float
    use: bool
    layout: Literal["dense", "sparse"]


def _check(d: int, expected_records: int, cohort_size: int) -> None:
    if d < 1:
        raise ValueError(f"d must be >= 1, got {d}")
    if expected_records < 1:
        raise ValueError(f"expected_records must be >= 1, got {expected_records}")
    if cohort_size < 1:
        raise ValueError(f"cohort_size must be >= 1, got {cohort_size}")


def _eps(epsilon: Decimal | str | int | float) -> float:
    eps = float(Decimal(str(epsilon)))
    if not eps > 0 or not math.isfinite(eps):
        raise ValueError(f"epsilon must be a positive number, got {epsilon}")
    return eps


def lsh_rule(*, d: int, expected_records: int, cohort_size: int = 1,
             epsilon: Decimal | str | int | float | None = None,
             mode: Mode = "independent", h_min: int = 0) -> LSHChoice:
    """LSH iTables ``(m, s)`` from public inputs only (module docstring).

    ``d`` is accepted for a uniform signature; the LSH rule does not depend on it.
    """
    _check(d, expected_records, cohort_size)
    if epsilon is None:
        return LSHChoice(PAPER_TABLES, PAPER_SIZE, math.inf, "log")
    noise_draws(mode, cohort_size, h_min)  # validates mode and h_min

    eps = str(epsilon)

    def snr(m: int, s: int) -> float:
        return occupied_snr(eps, mode, cohort_size, expected_records, m, s, h_min)

    for s in SIZES:
        fits = [m for m in TABLES if snr(m, s) >= LSH_TARGET]
        if fits:
            m = fits[0] if snr(fits[0], s) >= LOG_ALL_TABLES else min(fits[0], LOG_TABLES)
            return LSHChoice(m, s, snr(m, s), "log")
    m, s = TABLES[-1], SIZES[-1]
    return LSHChoice(m, s, snr(m, s), "mass")


def grid_rule(*, d: int, expected_records: int, cohort_size: int = 1,
              epsilon: Decimal | str | int | float | None = None,
              mode: Mode = "independent", delta: Decimal | str | int = "1e-6",
              cell_limit: int = 1_000_000) -> GridChoice:
    """Grid bins, projection, ``k`` and whether to use the grid, from public inputs only.

    ``d`` is the number of features the grid may use. The grid's noise is never aggregated
    securely (its release is per participant), so ``mode`` is accepted for a uniform
    signature and the grid's SNR counts ``p`` draws.
    """
    _check(d, expected_records, cohort_size)
    n_total = cohort_size * expected_records
    bins = GRID_BINS
    # private: stay dense (pure epsilon-DP, no threshold dropping sparse cells)
    dims_max = GRID_DIMS_MAX if epsilon is None else min(
        GRID_DIMS_MAX, max(1, int(math.log(cell_limit) / math.log(bins))))
    projection = None if d <= dims_max else min(GRID_PROJECTION, dims_max)
    dims = d if projection is None else projection
    n_cells = bins**dims
    layout: Literal["dense", "sparse"] = "dense" if n_cells <= cell_limit else "sparse"
    k = max(GRID_K_MIN, n_total // GRID_K_SHARE)
    if epsilon is None:
        return GridChoice(bins, projection, k, GRID_DEPTH, math.inf, True, layout)
    from common.detectors.combine import DetectorPlan

    eps = _eps(epsilon)
    snr = DetectorPlan.grid(Decimal(str(eps)), cohort_size, expected_records, n_cells,
                            sparse=layout == "sparse", delta=delta).snr
    return GridChoice(bins, projection, k, GRID_DEPTH, snr, snr >= GRID_MIN_SNR, layout)


def study_lsh(epsilon: Decimal | str | int, d: int, mode: Mode, cohort_size: int,
              expected_records: int, h_min: int = 0, n_tables: int | None = None,
              sample_size: int | None = None) -> tuple[int, int]:
    """``(n_tables, sample_size)`` for a study with a declared cohort: the administrator's
    values where given, the rest from :func:`lsh_rule`'s criterion (the deepest size, then
    the most tables, keeping ``Z_eff >= LSH_TARGET``). The scoring: :func:`study_scoring`."""
    if n_tables is not None and sample_size is not None:
        return n_tables, sample_size
    if n_tables is None and sample_size is None:
        choice = lsh_rule(d=d, expected_records=expected_records, cohort_size=cohort_size,
                          epsilon=epsilon, mode=mode, h_min=h_min)
        return choice.n_tables, choice.sample_size

    def ok(m: int, s: int) -> bool:
        snr = occupied_snr(epsilon, mode, cohort_size, expected_records, m, s, h_min)
        return snr >= LSH_TARGET

    if sample_size is not None:
        return next((m for m in TABLES if ok(m, sample_size)), TABLES[-1]), sample_size
    assert n_tables is not None
    return n_tables, next((s for s in SIZES if ok(n_tables, s)), SIZES[-1])


def study_scoring(epsilon: Decimal | str | int, mode: Mode, cohort_size: int,
                  expected_records: int, n_tables: int, sample_size: int,
                  h_min: int = 0) -> Literal["log", "mass"]:
    """The rule's cell scoring for a study's tables: ``log`` where they keep the target."""
    snr = occupied_snr(epsilon, mode, cohort_size, expected_records, n_tables, sample_size,
                       h_min)
    return "log" if snr >= LSH_TARGET else "mass"
