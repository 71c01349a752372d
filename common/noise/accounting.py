"""Trust assumption and privacy accounting of a secure-aggregation study.

README.md ("Distributed noise, trust assumption and table choice") and docs/TRUST.md tell
the same for a reader outside the code.

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
and the guarantee degrades sharply (m = 100, epsilon = 0.1, h_min = 10: 5 honest shares
give a pure-DP bound of about 25 per release, 1 share about 220; computed numerically from the
exact pmf ratios); that case is outside the stated assumption and is not charged.

Independent mode (one or two participants, contributions at any time): every participant
adds a full discrete Laplace (``h_min = 1``); nothing is assumed about other participants.
"""

from __future__ import annotations

from decimal import Decimal


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
