"""Table count and size chosen for the noise, from public inputs only.

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
finer model. Measured on six ODDS datasets (BENCHMARKS.md, "Secure aggregation accuracy",
the ``--sweep`` table: AUC of a grid of ``(m, s)`` under five noise levels, binned by ``Z``)
AUC reaches its plateau from ``Z = 2-3`` and falls to 56-87 below ``Z = 1``. So
:func:`choose_tables` keeps ``Z >= TARGET_SNR = 3``: the largest table size ``s`` in
(16, 8, 4) that still allows at least ``GOOD_TABLES = 40`` tables, with
``m = min(100, floor((N epsilon / (3 C sqrt(2k)))^2))``;
if even ``s = 4`` cannot, ``s = 4`` and ``m`` down to ``MIN_TABLES = 10``.
:func:`noise_warning` says when the chosen (or a fixed) configuration has ``Z < 3``, and
that noise dominates when ``Z < 1``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal, Protocol

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
    """A sentence for the administrator when noise will dominate (score SNR < 1) or cost
    accuracy (SNR < ``TARGET_SNR``), else ``None``. Public inputs only."""
    snr = score_snr(epsilon, mode, cohort_size, expected_records, n_tables, sample_size, h_min)
    if snr >= TARGET_SNR:
        return None
    k = noise_draws(mode, cohort_size, h_min)
    hint = (f"secure aggregation (one noise draw instead of {cohort_size})"
            if mode == "independent" and cohort_size >= 3 else "a larger epsilon")
    verdict = ("the model will be dominated by noise (expect near-random scores)"
               if snr < NOISE_DOMINATED_SNR else "noise will cost accuracy")
    return (
        f"{verdict}: with {cohort_size} participants of about {expected_records} records, "
        f"epsilon {epsilon}, mode {mode} ({k:g} noise draws per cell) and {n_tables} tables "
        f"of about {expected_cells(sample_size):.0f} cells, the score signal-to-noise ratio "
        f"is {snr:.2f} (below {NOISE_DOMINATED_SNR:g} noise dominates; {TARGET_SNR:g} gives "
        f"full accuracy). Use fewer or smaller tables (leave n_tables and sample_size unset "
        f"to have them chosen), more records or {hint}."
    )


class _Cohort(Protocol):
    mode: Mode
    cohort_size: int | None
    expected_records: int | None

    @property
    def h_min(self) -> int: ...


def _declared(aggregation: _Cohort | None) -> tuple[Mode, int, int, int] | None:
    if aggregation is None or aggregation.cohort_size is None:
        return None
    if aggregation.expected_records is None:
        return None
    h = aggregation.h_min if aggregation.mode == "secure" else 0
    return aggregation.mode, aggregation.cohort_size, aggregation.expected_records, h


def plan_lsh_tables(epsilon: Decimal | str | int, aggregation: _Cohort | None,
                    n_tables: int | None, sample_size: int | None) -> tuple[int, int]:
    """``(n_tables, sample_size)`` for ``study create``: the administrator's values where
    given; the rest from :func:`choose_tables` when the cohort size and expected records
    per participant are declared (``common.noise.AggregationParams``), else 100 and 16."""
    declared = _declared(aggregation)
    if declared is None or (n_tables is not None and sample_size is not None):
        return n_tables or MAX_TABLES, sample_size or SIZES[0]
    mode, cohort, records, h = declared
    if sample_size is not None:  # size fixed: the most tables that keep the target SNR
        z1 = score_snr(epsilon, mode, cohort, records, 1, sample_size, h)
        m = max(MIN_TABLES, min(MAX_TABLES, math.floor((z1 / TARGET_SNR) ** 2)))
        return m, sample_size
    if n_tables is not None:  # count fixed: the largest size that keeps the target SNR
        for size in SIZES:
            if score_snr(epsilon, mode, cohort, records, n_tables, size, h) >= TARGET_SNR:
                return n_tables, size
        return n_tables, SIZES[-1]
    plan = choose_tables(epsilon, mode, cohort, records, h)
    return plan.n_tables, plan.sample_size


def study_noise_warning(epsilon: Decimal | str | int, aggregation: _Cohort | None,
                        n_tables: int, sample_size: int) -> str | None:
    """:func:`noise_warning` for a study, or ``None`` when the cohort size or the expected
    records are not declared (nothing public to judge by)."""
    declared = _declared(aggregation)
    if declared is None:
        return None
    mode, cohort, records, h = declared
    return noise_warning(epsilon, mode, cohort, records, n_tables, sample_size, h)


def config_noise_warning(config: object, aggregation: _Cohort | None = None) -> str | None:
    """:func:`study_noise_warning` of a ``StudyConfig`` (its ``aggregation`` field, or the one
    given, e.g. from the create request), read from the public config only."""
    cohort = aggregation if aggregation is not None else getattr(config, "aggregation", None)
    lsh, privacy = getattr(config, "lsh"), getattr(config, "privacy")  # noqa: B009
    return study_noise_warning(privacy.epsilon_lsh, cohort, lsh.n_tables, lsh.sample_size)
