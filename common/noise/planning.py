"""Table count and size chosen for the noise, from public inputs only (issue 11, item 4).

Inputs are all public and declared by the administrator before any data is seen: the
per-release ``epsilon``, the aggregation mode, the cohort size ``p`` (and ``h_min`` for
secure aggregation) and an *expected* record count per participant. No participant data,
row count or data-derived statistic enters, so the choice costs no privacy.

Derivation
----------
Every record is counted once in each of the ``m`` tables, so the flat vector has L1
sensitivity ``m`` and every cell gets discrete Laplace noise of scale ``m / epsilon``, std
``sqrt(2) m / epsilon`` (for scales >> 1). The merged model carries ``k`` such draws per
cell: ``k = p`` with independent noise, ``k = p / h_min`` with secure aggregation (the sum of
``p`` Pólya shares sized for ``h_min`` is ``NB(p/h_min) - NB(p/h_min)``; 1 when nobody may
drop out or collude). With ``N = p * expected_records`` records and ``C(s)`` expected cells
per table, an occupied cell holds about ``N / C`` records:

    per-cell SNR   z = (N / C) / (sqrt(2 k) m / epsilon)

The mass score averages one cell per table over ``m`` independent tables, so its noise falls
by ``sqrt(m)``:

    score SNR      Z = sqrt(m) z = N epsilon / (C sqrt(2 k m))

Fewer tables and fewer cells raise ``Z``; more tables make a better ensemble and more cells a
finer model. Measured on six ODDS datasets (BENCHMARKS.md, "Secure aggregation accuracy")
AUC saturates at ``Z >= 3`` and collapses below ``Z = 1``. So :func:`choose_tables` keeps
``Z >= TARGET_SNR = 3``: the largest table size ``s`` in (16, 8, 4) that still allows at
least ``GOOD_TABLES = 40`` tables, with ``m = min(100, floor((N epsilon / (3 C sqrt(2k)))^2))``;
if even ``s = 4`` cannot, ``s = 4`` and ``m`` down to ``MIN_TABLES = 10``.
:func:`noise_warning` says when the chosen (or a fixed) configuration has ``Z < 1``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

Mode = Literal["independent", "secure"]

TARGET_SNR = 3.0
"""Score SNR at which the measured AUC saturates."""
NOISE_DOMINATED_SNR = 1.0
"""Below this score SNR the model is dominated by noise (warning)."""
MAX_TABLES, GOOD_TABLES, MIN_TABLES = 100, 40, 10
SIZES = (16, 8, 4)


@functools.lru_cache(maxsize=64)
def expected_cells(sample_size: int) -> float:
    """Expected cells ``E[2^l]`` of one table derived with ``sample_size`` (the law of
    ``common.hashing``: ``f ~ U(1/sqrt(s), 1 - 1/sqrt(s))``, ``L = log_max(2,1/f)(s)``,
    ``l ~ U(1 + L/2, L)`` rounded half up, at least 1), by a 200 x 200 midpoint rule."""
    if sample_size < 2:
        raise ValueError(f"sample_size must be >= 2, got {sample_size}")
    s, steps = float(sample_size), 200
    a, b = sorted((1 / math.sqrt(s), 1 - 1 / math.sqrt(s)))
    total = 0.0
    for i in range(steps):
        f = a + (b - a) * (i + 0.5) / steps
        big_l = math.log(s) / math.log(max(2.0, 1.0 / f))
        lo, hi = sorted((1 + big_l / 2, big_l))
        for j in range(steps):
            length = lo + (hi - lo) * (j + 0.5) / steps
            total += 2.0 ** max(1, min(40, math.floor(length + 0.5)))
    return total / steps**2


def noise_draws(mode: Mode, cohort_size: int, h_min: int = 0) -> float:
    """Discrete Laplace draws ``k`` per merged cell: ``p`` (independent) or ``p / h_min``
    (secure; ``h_min = 0`` means ``p``, one draw)."""
    if cohort_size < 1:
        raise ValueError(f"cohort_size must be >= 1, got {cohort_size}")
    if mode == "independent":
        return float(cohort_size)
    if mode != "secure":
        raise ValueError(f"mode must be 'independent' or 'secure', got {mode!r}")
    h = h_min or cohort_size
    if not 1 <= h <= cohort_size:
        raise ValueError(f"h_min must be in [1, {cohort_size}], got {h_min}")
    return cohort_size / h


def score_snr(epsilon: Decimal | str | int, mode: Mode, cohort_size: int,
              expected_records: int, n_tables: int, sample_size: int, h_min: int = 0) -> float:
    """``Z = N epsilon / (C(s) sqrt(2 k m))`` with ``N = cohort_size * expected_records``."""
    eps = float(Decimal(str(epsilon)))
    if not eps > 0:
        raise ValueError(f"epsilon must be positive, got {epsilon}")
    if expected_records < 1:
        raise ValueError(f"expected_records must be >= 1, got {expected_records}")
    if n_tables < 1:
        raise ValueError(f"n_tables must be >= 1, got {n_tables}")
    k = noise_draws(mode, cohort_size, h_min)
    n_total = cohort_size * expected_records
    return n_total * eps / (expected_cells(sample_size) * math.sqrt(2 * k * n_tables))


@dataclass(frozen=True)
class TablePlan:
    """Chosen ``n_tables`` and ``sample_size`` with the score SNR they give."""

    n_tables: int
    sample_size: int
    snr: float

    @property
    def noise_dominated(self) -> bool:
        return self.snr < NOISE_DOMINATED_SNR


def choose_tables(epsilon: Decimal | str | int, mode: Mode, cohort_size: int,
                  expected_records: int, h_min: int = 0) -> TablePlan:
    """Table count and size for the noise (module docstring), from public inputs only.

    Parameters
    ----------
    epsilon : per-release epsilon of the LSH tables.
    mode : "independent" or "secure".
    cohort_size : participants ``p`` whose releases are merged.
    expected_records : administrator-declared expected records per participant.
    h_min : secure mode: honest shares guaranteed in every sum (0 means ``p``).
    """

    def tables_for(size: int) -> int:
        z1 = score_snr(epsilon, mode, cohort_size, expected_records, 1, size, h_min)
        return min(MAX_TABLES, math.floor((z1 / TARGET_SNR) ** 2))

    for size in SIZES:
        m = tables_for(size)
        if m >= GOOD_TABLES:
            break
    else:
        size = SIZES[-1]
        m = max(MIN_TABLES, tables_for(size))
    snr = score_snr(epsilon, mode, cohort_size, expected_records, m, size, h_min)
    return TablePlan(m, size, snr)


def noise_warning(epsilon: Decimal | str | int, mode: Mode, cohort_size: int,
                  expected_records: int, n_tables: int, sample_size: int,
                  h_min: int = 0) -> str | None:
    """A sentence for the administrator when the configuration is dominated by noise
    (score SNR < 1), else ``None``. Public inputs only."""
    snr = score_snr(epsilon, mode, cohort_size, expected_records, n_tables, sample_size, h_min)
    if snr >= NOISE_DOMINATED_SNR:
        return None
    k = noise_draws(mode, cohort_size, h_min)
    hint = ("secure aggregation (one noise draw instead of "
            f"{cohort_size})" if mode == "independent" and cohort_size >= 3 else
            "a larger epsilon or more records")
    return (
        f"the model will be dominated by noise: with {cohort_size} participants of about "
        f"{expected_records} records, epsilon {epsilon}, mode {mode} ({k:g} noise draws per "
        f"cell), {n_tables} tables of about {expected_cells(sample_size):.0f} cells, the "
        f"score signal-to-noise ratio is {snr:.2f} (< {NOISE_DOMINATED_SNR:g}; "
        f"{TARGET_SNR:g} is needed for full accuracy). Expect near-random scores; use fewer "
        f"tables, smaller tables or {hint}."
    )
