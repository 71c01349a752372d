"""Combined outlier score: rank percentiles weighted by each detector's public signal-to-noise.

Each detector's scores become rank percentiles within the participant's own file (average
rank of ties divided by ``n``, in ``(0, 1]``, 1 = most outlying), so detectors on different
scales are comparable; the combined score is their weighted mean. With equal weights this is
the plain mean of ranks, where a noise-dominated detector (the grid on most data) pulls the
combination below the best detector alone.

Weights from public inputs only (:func:`public_weights`)
--------------------------------------------------------
Each detector's *score SNR* ``Z`` is computed from what the signed config and the
administrator declare -- epsilon, the cohort size ``p`` (``p`` independent noise draws per
merged value), the expected records per participant (``N = p * expected``) and the model's
size -- never from data, labels or row counts (:class:`DetectorPlan`):

- LSH iTables: ``Z = N epsilon / (C(s) sqrt(2 p m))``, :func:`common.noise.planning.score_snr`.
- Grid k-NN (dense): records per cell if the ``N`` records filled the ``n_cells`` cells
  evenly, over the summed noise std of a cell: ``Z = (N / n_cells) epsilon / sqrt(2 p)``
  (the walk visits about ``k`` cells' worth of records, but every visited cell adds noise
  too, so the ratio per cell stands). Sparse: the thresholded release drops every cell
  below its threshold ``T`` (about ``log(1/delta)/epsilon``) *per participant*; with
  ``expected / n_cells`` far below ``T`` nearly nothing is released, so ``Z`` is that
  per-cell expectation over ``T``.
- Centroid: the error of a cohort centre in the unit box, from the noise of the last
  round's sums (standard deviation ``sd`` per coordinate in ``[-1, 1]`` units, ``p`` draws)
  over the cohort's expected size ``N / k``, relative to the detector's bandwidth ``h``:
  ``Z = h / (sqrt(p) sd / (2 (N / k)))``. ``eps_sums`` is the last round's share of the
  exact split (:func:`common.cohorts.plan.split_epsilon`: under ``schedule: adaptive`` the
  last round carries more than ``epsilon / rounds``); Laplace sums: ``sd = sqrt(2) d /
  eps_sums``; Gaussian sums: ``sd`` is the discrete Gaussian's scale at L2 sensitivity
  ``sqrt(d)`` for the last round's ``(eps_sums, delta_r)``.

A detector's weight is its reliability ``Z^2 / (1 + Z^2)`` -- the share of its score
variance that is signal if signal and noise add with variances ``Z^2`` and 1 -- so a
noise-dominated detector (``Z << 1``) all but drops out and detectors with ``Z >> 1`` count
equally. Weights are normalised to sum to 1; if every ``Z`` is 0 they are equal.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from common.noise.planning import Mode, score_snr

Floats = NDArray[np.float64]
Ranks = NDArray[np.int64]


def average_ranks(x: Floats) -> Floats:
    """1-based ranks, ties sharing the mean of their ranks (``rankdata(x, "average")``)."""
    order = np.argsort(x, kind="stable")
    ordered = x[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], x.size]
    ranks = np.empty(x.size, dtype=np.float64)
    ranks[order] = np.repeat((starts + 1 + ends) / 2.0, ends - starts)
    return ranks


def shares(names: Collection[str], weights: Mapping[str, float] | None) -> dict[str, float]:
    """Each detector's share of the combined score, in ``names`` order, zero shares left out.

    ``weights`` (one per detector, non-negative, not all 0) default to equal weights;
    detectors absent from ``weights`` weigh 0.
    """
    w = {name: 1.0 for name in names} if weights is None else {
        name: float(weights.get(name, 0.0)) for name in names}
    total = sum(w.values())
    if any(v < 0 or not math.isfinite(v) for v in w.values()) or not total > 0:
        raise ValueError(f"weights must be finite, non-negative and not all 0, got {w}")
    return {name: v / total for name, v in w.items() if v}


def mix(combined: Floats, share: float, ranks: Floats, n: int) -> None:
    """Add one detector's rank percentiles (``ranks / n``) at ``share`` to ``combined``, in
    place: every engine adds them this way, in the same order, so the bits agree."""
    combined += share * ranks / n


def combine(scores: Mapping[str, Floats],
            weights: Mapping[str, float] | None = None) -> tuple[Floats, Ranks]:
    """Weighted mean rank percentile over detectors, and the 1-based rank (1 = most outlying).

    ``weights`` (one per detector, non-negative, not all 0; normalised here) default to
    equal weights, the plain mean of ranks. Detectors absent from ``weights`` weigh 0.
    """
    n = len(next(iter(scores.values())))
    combined = np.zeros(n, dtype=np.float64)
    for name, share in shares(scores, weights).items():
        mix(combined, share, average_ranks(np.asarray(scores[name], dtype=np.float64)), n)
    order = np.argsort(-combined, kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(1, n + 1)
    return combined, rank


@dataclass(frozen=True)
class DetectorPlan:
    """A detector's expected score SNR ``snr``, from public inputs only (module docstring)."""

    snr: float

    @classmethod
    def lsh(cls, epsilon: Decimal | str | int, participants: int, expected_records: int,
            n_tables: int, sample_size: int, mode: Mode = "independent",
            h_min: int = 0) -> DetectorPlan:
        """LSH iTables (:func:`common.noise.planning.score_snr`; secure mode: ``p / h_min``
        noise draws per merged cell)."""
        return cls(score_snr(epsilon, mode, participants, expected_records, n_tables,
                             sample_size, h_min))

    @classmethod
    def grid(cls, epsilon: Decimal | str | int, participants: int, expected_records: int,
             n_cells: int, *, sparse: bool, delta: Decimal | str | int = "1e-6") -> DetectorPlan:
        """Grid k-NN: even-fill records per cell over the summed noise (or the threshold)."""
        eps = _positive(epsilon)
        if sparse:
            threshold = math.log(1.0 / float(Decimal(str(delta)))) / eps
            return cls(expected_records / n_cells / threshold)
        n_total = participants * expected_records
        return cls(n_total / n_cells * eps / math.sqrt(2.0 * participants))

    @classmethod
    def centroid(cls, epsilon: Decimal | str | int, participants: int, expected_records: int,
                 k: int, d: int, *, rounds: int = 3, count_share: float | str = 0.2,
                 bandwidth: float | None = None, schedule: str = "even",
                 declared_n: int | None = None) -> DetectorPlan:
        """Centroid detector: bandwidth over the expected error of a cohort centre after the
        last of ``rounds`` rounds split by ``schedule``; ``declared_n``: Gaussian sums."""
        from common.cohorts.plan import split_delta, split_epsilon
        from common.detectors.centroid import default_bandwidth

        _positive(epsilon)
        eps_sums = split_epsilon(epsilon, rounds, str(count_share), schedule)[-1][1]
        if declared_n is None:
            sd = math.sqrt(2.0) * d / float(eps_sums)
        else:
            from common.noise.gaussian import histogram_scale

            sd = histogram_scale(d, eps_sums, split_delta(declared_n, rounds)[-1])
        size = participants * expected_records / k
        error = math.sqrt(participants) * sd / (2.0 * size)
        h = default_bandwidth(k, d) if bandwidth is None else bandwidth
        return cls(h / error)

    @property
    def reliability(self) -> float:
        """``Z^2 / (1 + Z^2)`` in [0, 1)."""
        z2 = self.snr * self.snr
        return z2 / (1.0 + z2) if math.isfinite(z2) else 1.0


def _positive(epsilon: Decimal | str | int) -> float:
    eps = float(Decimal(str(epsilon)))
    if not eps > 0:
        raise ValueError(f"epsilon must be positive, got {epsilon}")
    return eps


def public_weights(plans: Mapping[str, DetectorPlan],
                   rule: Literal["reliability", "precision"] = "reliability"
                   ) -> dict[str, float]:
    """Normalised weights of the detectors (equal if all are 0).

    ``"reliability"`` (default): ``Z^2 / (1 + Z^2)``. ``"precision"``: ``Z sqrt(1 + Z^2)``,
    the least-squares weight if every detector's standardised score were one shared signal
    plus independent noise (signal share ``a = Z / sqrt(1 + Z^2)``, noise variance
    ``b^2 = 1 / (1 + Z^2)``, weight ``a / b^2``); it leans on the least noisy detector.
    """
    if rule not in ("reliability", "precision"):
        raise ValueError(f"rule must be 'reliability' or 'precision', got {rule!r}")
    rel = {name: plan.reliability if rule == "reliability" else
           plan.snr * math.sqrt(1.0 + plan.snr**2) for name, plan in plans.items()}
    total = sum(rel.values())
    if not total > 0:
        return {name: 1.0 / len(rel) for name in rel}
    return {name: r / total for name, r in rel.items()}


def study_weights(config: Any, names: Collection[str],
                  centroid: DetectorPlan | None = None) -> dict[str, float] | None:
    """:func:`public_weights` of a study's detectors ``names`` from its signed config (its
    ``privacy``, ``lsh``, ``grid`` and ``aggregation`` sections: public only), or ``None``
    (equal weights) when the cohort size or the expected records per participant are not
    declared, or a ``"centroid"`` detector is scored without its ``centroid`` plan: with
    nothing public to judge by, no detector is preferred."""
    agg = getattr(config, "aggregation", None)
    if agg is None or agg.cohort_size is None or agg.expected_records is None:
        return None
    p, expected = agg.cohort_size, agg.expected_records
    privacy, plans = config.privacy, {}
    for name in names:
        if name == "lsh":
            plans[name] = DetectorPlan.lsh(privacy.epsilon_lsh, p, expected,
                                           config.lsh.n_tables, config.lsh.sample_size,
                                           agg.mode, agg.h_min if agg.mode == "secure" else 0)
        elif name == "grid" and config.grid is not None:
            plans[name] = DetectorPlan.grid(privacy.epsilon_grid, p, expected,
                                            config.grid_cells,
                                            sparse=config.grid_layout == "sparse",
                                            delta=privacy.delta_grid or "1e-6")
        elif name == "centroid" and (plan := centroid or centroid_plan(config)) is not None:
            plans[name] = plan
        else:
            return None
    return public_weights(plans)


def centroid_plan(config: Any) -> DetectorPlan | None:
    """The centroid detector's plan for a study's k-means cohorts, from its signed config
    (``cohorts`` and ``aggregation`` sections: public only: its rounds, schedule and sum
    noise give the last round's noise exactly); ``None`` for the DPM tree (its
    centres come from leaf histograms, which this plan does not model) or when the cohort
    size or the expected records per participant are not declared."""
    cohorts, agg = getattr(config, "cohorts", None), getattr(config, "aggregation", None)
    if (cohorts is None or cohorts.method != "kmeans" or cohorts.k is None or agg is None
            or agg.cohort_size is None or agg.expected_records is None):
        return None
    return DetectorPlan.centroid(cohorts.epsilon, agg.cohort_size, agg.expected_records,
                                 cohorts.k, len(config.features), rounds=cohorts.rounds,
                                 count_share=format(cohorts.count_share, "f"),
                                 schedule=cohorts.schedule,
                                 declared_n=(cohorts.declared_n
                                             if cohorts.sum_noise == "gaussian" else None))
