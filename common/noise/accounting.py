"""Trust assumption and privacy accounting of a secure-aggregation study.

docs/SECURE_AGGREGATION.md ("Distributed noise, trust assumption and table choice") and
docs/TRUST.md tell the same for a reader outside the code; every loss figure in docs/TRUST.md
comes from :func:`loss_with_honest_shares` (checked by tests/common/test_trust_figures.py).

Threat model
------------
The signed study config fixes the cohort size ``n``, the number ``d`` of participants that
may drop out of a round and the number ``t`` of participants that may collude with each
other and with an honest-but-curious coordinator (who follows the protocol but reads
everything it is sent). Secure aggregation reveals only the sum of the surviving
participants' noisy vectors. Colluders know their own noise shares and can subtract them, so
the noise that protects an honest participant is the sum of the shares of the *honest
survivors*: at least ``n - d - t`` of them. Hence

    h_min = n - d - t

and every participant sizes its share for ``h_min`` (``common.noise.sample_noise_share``):
any ``h_min`` shares sum to one full discrete Laplace of scale ``sensitivity / epsilon``,
more shares only add noise. A sum may be revealed only over at least ``n - d`` participants
(:func:`min_survivors`, i.e. ``h_min + t``), so that after subtracting up to ``t``
colluders' shares ``h_min`` honest ones remain.

Guarantee: against the coordinator together with up to ``t`` colluding participants, each
honest participant's release is ``epsilon``-DP (pure, add/remove one record) per release, as
with independent noise, and its ledger is charged ``epsilon`` per release
(:func:`charged_epsilon`). Not protected: more than ``t`` colluders, or a coordinator that
deviates from the protocol beyond what the participants verify (signed roster of the signed
cohort size). With fewer than ``h_min`` honest shares the noise is ``NB(k/h_min)`` differences
and the guarantee degrades sharply (:func:`loss_with_honest_shares`; m = 100, epsilon = 0.1,
h_min = 10: 5 honest shares give a pure-DP loss of 25.2 per release, 1 share 220.1); that case
is outside the stated assumption and is not charged.

Independent mode (one or two participants, contributions at any time): every participant
adds a full discrete Laplace (``h_min = 1``); nothing is assumed about other participants.
"""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np


def _count(name: str, value: int, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


def honest_minimum(cohort_size: int, max_dropouts: int, max_colluders: int) -> int:
    """``h_min = n - d - t``: honest shares guaranteed in every revealed sum.

    Raises ``ValueError`` unless ``n >= 1``, ``d, t >= 0`` and ``h_min >= 1``.
    """
    n = _count("cohort_size", cohort_size, 1)
    d = _count("max_dropouts", max_dropouts, 0)
    t = _count("max_colluders", max_colluders, 0)
    h = n - d - t
    if h < 1:
        raise ValueError(
            f"a cohort of {n} that tolerates {d} dropouts and {t} colluding participants "
            f"leaves {h} honest survivors; at least 1 is needed (n - d - t >= 1)"
        )
    return h


def min_survivors(cohort_size: int, max_dropouts: int, max_colluders: int) -> int:
    """Fewest participants a revealed sum may cover: ``n - d = h_min + t``."""
    return honest_minimum(cohort_size, max_dropouts, max_colluders) + max_colluders


def charged_epsilon(epsilon: Decimal | int | str) -> Decimal:
    """Epsilon charged to each participant per release under the stated assumption: the
    study's epsilon (the honest survivors' shares sum to at least one discrete Laplace of
    scale ``sensitivity / epsilon``), the same as in independent mode."""
    eps = Decimal(str(epsilon))
    if not eps.is_finite() or eps <= 0:
        raise ValueError(f"epsilon must be positive, got {epsilon}")
    return eps


def _share_sum_log_pmf(shares: int, h_min: int, alpha: float) -> np.ndarray:
    """log P(Z = z) for z = 0, 1, ..., where Z is the sum of ``shares`` noise shares, each
    ``NB(1/h_min, alpha) - NB(1/h_min, alpha)``: ``Z = X - Y``, X and Y iid
    ``NB(shares / h_min, alpha)`` (``P(j) = Gamma(j + r) / (Gamma(r) j!) (1 - alpha)^r
    alpha^j``), for z up to :data:`_REACH`, the sums truncated where the tail is below
    ``e**-80`` of the mode."""
    from scipy.special import gammaln  # accounting only: scoring must not load scipy

    r = shares / h_min
    top = int(math.ceil((80 + 10 * abs(math.log(r))) / -math.log(alpha))) + 50
    j = np.arange(top, dtype=np.float64)
    log_p = gammaln(j + r) - gammaln(r) - gammaln(j + 1) + r * math.log1p(-alpha) \
        + j * math.log(alpha)
    out = np.empty(_REACH + 1)
    for z in range(_REACH + 1):  # P(Z = z) = sum_j P(j + z) P(j), in log space
        terms = log_p[z:] + log_p[: top - z]
        peak = terms.max()
        out[z] = peak + math.log(np.exp(terms - peak).sum())
    return out


_REACH = 64
"""Offsets z at which the pmf ratio is computed: it is largest at z = 0 and falls towards
``1 / alpha`` (checked by the tests); the loss takes the maximum over these."""


def loss_with_honest_shares(epsilon: Decimal | float | str, sensitivity: int, h_min: int,
                            shares: int) -> float:
    """The exact pure-DP privacy loss of one secure release whose sum an observer sees with
    only ``shares`` of the ``h_min`` honest noise shares left (the others subtracted by more
    colluders than the config tolerates, or recovered), for add/remove one record: one
    record moves one cell of each of the ``sensitivity`` tables by one, so the loss is
    ``sensitivity * max_z log(P(Z = z) / P(Z = z + 1))`` with Z the sum of the shares left
    (alpha = exp(-epsilon / sensitivity)). With ``shares >= h_min`` it is ``epsilon`` (one
    full discrete Laplace or more); below, it grows like ``log(h_min / shares)`` per table."""
    if not shares >= 1 or sensitivity < 1 or h_min < 1:
        raise ValueError("need shares >= 1, sensitivity >= 1 and h_min >= 1")
    eps = float(epsilon)
    if shares >= h_min:
        return eps
    log_pmf = _share_sum_log_pmf(shares, h_min, math.exp(-eps / sensitivity))
    worst = float(np.max(log_pmf[:-1] - log_pmf[1:]))
    return sensitivity * max(worst, eps / sensitivity)


def share_sum_sd(epsilon: Decimal | float | str, sensitivity: int, h_min: int,
                 shares: int) -> float:
    """Standard deviation of one cell's noise when ``shares`` of the ``h_min`` shares are
    left: ``sqrt(2 r alpha) / (1 - alpha)``, r = shares / h_min."""
    alpha = math.exp(-float(epsilon) / sensitivity)
    return math.sqrt(2 * min(shares, h_min) / h_min * alpha) / (1 - alpha)
