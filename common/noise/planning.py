"""How loud the LSH tables' noise is against their signal, from public inputs only.

Inputs are all public and declared by the administrator before any data is seen: the
per-release ``epsilon``, the aggregation mode, the cohort size ``p`` (and ``h_min`` for
secure aggregation) and an *expected* record count per participant. No participant data,
row count or data-derived statistic enters, so nothing here costs privacy.

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
AUC reaches its plateau from ``Z = 2-3`` and falls to 56-87 below ``Z = 1``.

The table count and size of a study with a declared cohort are chosen by
:func:`common.detectors.rules.study_lsh` (by the occupied-cell SNR, :func:`occupied_snr`);
without one, :func:`plan_lsh_tables` keeps the administrator's values or the defaults
100 x 16. :func:`noise_warning` says when a configuration has ``Z < 1`` (noise may cost
accuracy) and when even the occupied-cell SNR is below 1 (noise dominates).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Literal, Protocol

Mode = Literal["independent", "secure"]

NOISE_DOMINATED_SNR = 1.0
"""Below this score SNR the model is dominated by noise (warning)."""
MAX_TABLES, MIN_TABLES = 100, 10
SIZES = (16, 8, 4)


@functools.lru_cache(maxsize=64)
def expected_cells(sample_size: int) -> float:
    """Expected cells ``E[2^l]`` of one table derived with ``sample_size`` (the law of
    ``common.histograms.hashing``: ``f ~ U(1/sqrt(s), 1 - 1/sqrt(s))``, ``L = log_max(2,1/f)(s)``,
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


def occupied_snr(epsilon: Decimal | str | int, mode: Mode, cohort_size: int,
                 expected_records: int, n_tables: int, sample_size: int,
                 h_min: int = 0) -> float:
    """``Z_eff = Z sqrt(C(s))``: the score SNR when the records fill about ``sqrt(C(s))`` cells
    of a table, as real records do (the measure ``common.detectors.rules`` chooses tables
    by, and its measured floor of 1); :func:`score_snr` is the even fill over all cells."""
    return (score_snr(epsilon, mode, cohort_size, expected_records, n_tables, sample_size,
                      h_min) * math.sqrt(expected_cells(sample_size)))


Snr = Callable[..., float]


def noise_warning(epsilon: Decimal | str | int, mode: Mode, cohort_size: int,
                  expected_records: int, n_tables: int, sample_size: int,
                  h_min: int = 0) -> str | None:
    """A sentence for the administrator, from public inputs only, else ``None``: the model
    will be dominated by noise when even the occupied-cell SNR (:func:`occupied_snr`) is
    below 1; noise may cost accuracy when only the even-fill SNR (:func:`score_snr`) is.
    Measurements support each in its regime (BENCHMARKS.md: the secure-aggregation sweep
    for the even fill, the parameter rules for occupied cells), so both figures are given."""
    args = (epsilon, mode, cohort_size, expected_records, n_tables, sample_size, h_min)
    spread, occupied = score_snr(*args), occupied_snr(*args)
    if spread >= NOISE_DOMINATED_SNR:
        return None
    dominated = occupied < NOISE_DOMINATED_SNR
    verdict = ("the model will be dominated by noise (expect near-random scores)" if dominated
               else "noise may cost accuracy")
    k = noise_draws(mode, cohort_size, h_min)
    return (
        f"{verdict}: with {cohort_size} participants of about {expected_records} records, "
        f"epsilon {Decimal(str(epsilon)).normalize():f}, mode {mode} ({k:g} noise draws per "
        f"cell) and {n_tables} tables of about {expected_cells(sample_size):.0f} cells, the "
        f"score signal-to-noise ratio is {occupied:.2f} over the cells records typically fill "
        f"and {spread:.2f} if they fill every cell (below {NOISE_DOMINATED_SNR:g} noise "
        f"dominates). To bring the {'first' if dominated else 'second'} to "
        f"{NOISE_DOMINATED_SNR:g}: " + "; or ".join(
            remedies(occupied_snr if dominated else score_snr, *args, tables=dominated)) + "."
    )


def remedies(snr: Snr, epsilon: Decimal | str | int, mode: Mode, cohort_size: int,
             expected_records: int, n_tables: int, sample_size: int,
             h_min: int = 0, *, tables: bool = True) -> list[str]:
    """What would bring ``snr`` (:func:`score_snr` or :func:`occupied_snr`) to 1, each change
    alone, from the public inputs: a larger epsilon, fewer or smaller tables (only with
    ``tables``), more participants, secure aggregation. It is linear in epsilon, falls as
    ``1/sqrt(m)`` and grows with the cohort.

    Tables are chosen by the occupied-cell figure (``common.detectors.rules``), so only a
    warning about that figure proposes other tables: raising the even-fill figure by smaller
    tables would contradict the rule, which measured them worse."""
    goal = NOISE_DOMINATED_SNR
    now = snr(epsilon, mode, cohort_size, expected_records, n_tables, sample_size, h_min)
    ratio = goal / now
    eps = Decimal(str(epsilon)) * Decimal(str(ratio))
    out = [f"epsilon {float(eps):.3g} per release (costs every participant that much per release)"]
    m = math.floor(n_tables / ratio**2)
    fewer = next((f"{m2} tables of size {size}" for size in SIZES
                  if (m2 := min(n_tables, math.floor(n_tables * (snr(
                      epsilon, mode, cohort_size, expected_records, n_tables, size, h_min)
                      / goal) ** 2))) >= MIN_TABLES), None)
    if tables and m >= MIN_TABLES:
        out.append(f"{m} tables instead of {n_tables}")
    elif tables and fewer is not None:
        out.append(fewer)
    lost = cohort_size - (h_min or cohort_size)
    more = next((p for p in range(cohort_size + 1, 1001) if snr(
        epsilon, mode, p, expected_records, n_tables, sample_size,
        p - lost if mode == "secure" else 0) >= goal), None)
    if more is not None:
        out.append(f"{more} participants (hospitals) of this size instead of {cohort_size}")
    if mode == "independent" and cohort_size >= 3:
        secure = snr(epsilon, "secure", cohort_size, expected_records, n_tables, sample_size,
                     cohort_size - 1)
        out.append(f"secure aggregation (one noise draw instead of {cohort_size}: "
                   f"{secure:.2f})")
    return out


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


def plan_lsh_tables(n_tables: int | None, sample_size: int | None) -> tuple[int, int]:
    """``(n_tables, sample_size)`` for ``study create`` without a declared cohort size and
    expected records: the administrator's values where given, else 100 and 16 (with a
    declared cohort, :func:`common.detectors.rules.study_lsh` chooses)."""
    return n_tables or MAX_TABLES, sample_size or SIZES[0]


def study_noise_warning(epsilon: Decimal | str | int, aggregation: _Cohort | None,
                        n_tables: int, sample_size: int) -> str | None:
    """:func:`noise_warning` for a study, or ``None`` when the cohort size or the expected
    records are not declared (nothing public to judge by)."""
    declared = _declared(aggregation)
    if declared is None:
        return None
    mode, cohort, records, h = declared
    return noise_warning(epsilon, mode, cohort, records, n_tables, sample_size, h)


def config_snr(config: object, aggregation: _Cohort | None = None
               ) -> tuple[float, float] | None:
    """``(occupied, even fill)`` score SNRs of a ``StudyConfig`` (:func:`occupied_snr`,
    :func:`score_snr`) from its public fields, or ``None`` when the cohort size or the
    expected records are not declared."""
    declared = _declared(aggregation if aggregation is not None
                         else getattr(config, "aggregation", None))
    if declared is None:
        return None
    mode, cohort, records, h = declared
    lsh, privacy = getattr(config, "lsh"), getattr(config, "privacy")  # noqa: B009
    args = (privacy.epsilon_lsh, mode, cohort, records, lsh.n_tables, lsh.sample_size, h)
    return occupied_snr(*args), score_snr(*args)


def config_noise_warning(config: object, aggregation: _Cohort | None = None) -> str | None:
    """:func:`study_noise_warning` of a ``StudyConfig`` (its ``aggregation`` field, or the one
    given, e.g. from the create request), read from the public config only."""
    cohort = aggregation if aggregation is not None else getattr(config, "aggregation", None)
    lsh, privacy = getattr(config, "lsh"), getattr(config, "privacy")  # noqa: B009
    return study_noise_warning(privacy.epsilon_lsh, cohort, lsh.n_tables, lsh.sample_size)
