"""Per-record privacy accounting for the private online learner.

A record is used at most twice: once by its query decision (``epsilon_s``, pure DP, always)
and, if labelled, once inside exactly one mini-batch release (``(epsilon_g, delta_g)``).
Basic composition gives each record ``(epsilon_s + epsilon_g, delta_g)``. Different records
sit in different decisions and different batches, and everything later in the stream depends
on a record only through released outputs (post-processing), so the stream as a whole is
``(epsilon_s + epsilon_g, delta_g)``-DP for neighbouring streams that differ in one record
(parallel composition across records; adaptive, since later weights depend on earlier
releases). That is the charge: it does not grow with the stream's length.

A centring record (``OnlineConfig.centre``) is never queried and enters exactly one release,
the noisy sum of the centring records (the same Gaussian, sensitivity ``M``): it costs
``(epsilon_g, delta_g)``, within the per-record charge. Later records are centred on the
released mean: post-processing, and each centred record is projected back into the ball of
``M``, so the gradient sensitivity stays ``M``.

Epsilon from a float computation is rounded *up* to the ledger's 1e-9 quantum.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal

from common.budget import DELTA_QUANTUM, EPSILON_QUANTUM, PrivacyBudget
from common.noise.gradient import GradientNoise
from common.online.query import QueryRule

__all__ = ["ceil_budget", "record_cost", "selection_cost"]


def ceil_budget(epsilon: float, delta: float = 0.0) -> PrivacyBudget:
    """A :class:`PrivacyBudget` at least as large as ``(epsilon, delta)``."""
    eps = Decimal(epsilon).quantize(EPSILON_QUANTUM, rounding=ROUND_CEILING)
    dlt = Decimal(delta).quantize(DELTA_QUANTUM, rounding=ROUND_CEILING)
    return PrivacyBudget(eps, dlt)


def selection_cost(rule: QueryRule | None) -> PrivacyBudget:
    """True cost of one query decision; ``None`` (label everything) costs nothing."""
    return PrivacyBudget(0) if rule is None else ceil_budget(rule.epsilon())


def record_cost(rule: QueryRule | None, noise: GradientNoise) -> PrivacyBudget:
    """Charge per record, and so for the whole stream: selection plus one gradient release."""
    return selection_cost(rule) + ceil_budget(noise.epsilon, noise.delta)
