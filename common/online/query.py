"""Private query rules: which streamed records the reviewer is asked to label.

Ghassemi, Sarwate & Wright, "Differentially Private Online Active Learning with Applications
to Anomaly Detection" (AISec 2016), screen the stream with a *randomised* active-learning
rule: a record near the decision boundary (small margin ``|<w, x>|``) is more likely to be
queried, but every record has a non-zero chance either way, so whether a record was queried
is itself differentially private. The query decision is the only thing an unlabelled record
influences.

Neighbouring streams differ in one record, i.e. in one margin. The margin of a record in the
ball of radius ``M`` against a weight vector in the ball of radius ``R`` lies in
``[0, R * M]`` (Cauchy-Schwarz), a public bound. A rule with query probability ``q(m)`` is
``epsilon``-DP with

    epsilon = max over m, m' of max(|log q(m) / q(m')|, |log (1 - q(m)) / (1 - q(m'))|),

both the "queried" and the "not queried" outcome counted. :meth:`epsilon` computes exactly
that for each rule; ``docs/ONLINE.md`` shows where an analysis that looks at the "queried"
branch only undercharges (the exponential rule's ~1.17 vs a claimed 1).

The coin is exact: a float probability is a dyadic rational ``k / 2**e``, so comparing
``e`` uniform bits from :mod:`secrets` (a CSPRNG) with ``k`` is an exact Bernoulli draw.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["RandomizedResponseRule", "ExponentialRule", "QueryRule", "bernoulli", "bernoulli_count"]


def bernoulli(probability: float) -> bool:
    """Exact Bernoulli(``probability``) draw from the operating system's CSPRNG."""
    return bernoulli_count(probability, 1) == 1


def bernoulli_count(probability: float, n: int) -> int:
    """Successes in ``n`` independent exact Bernoulli(``probability``) draws (CSPRNG); the
    float's exact binary fraction is computed once, not per draw."""
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"probability must be in [0, 1], got {probability}")
    frac = Fraction(probability)
    bits = frac.denominator.bit_length() - 1  # the denominator is 2**bits
    if not bits:
        return n if frac.numerator == 1 else 0
    return sum(secrets.randbits(bits) < frac.numerator for _ in range(n))


def _check_probability(name: str, value: float) -> None:
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must be strictly between 0 and 1, got {value}")


@dataclass(frozen=True)
class RandomizedResponseRule:
    """Query with probability ``p`` if ``|margin| <= tau``, else with probability ``1 - p``.

    Randomised response on the bit "near the boundary": ``epsilon = |log(p / (1 - p))|``
    whatever the margins, so no margin bound is needed.
    """

    p: float
    tau: float

    def __post_init__(self) -> None:
        _check_probability("p", self.p)
        if not (math.isfinite(self.tau) and self.tau >= 0):
            raise ValueError(f"tau must be finite and >= 0, got {self.tau}")

    @classmethod
    def for_epsilon(cls, epsilon: float, tau: float) -> RandomizedResponseRule:
        """The rule of true epsilon ``<= epsilon``: ``p = e^eps / (1 + e^eps)``, moved towards
        1/2 by ulps while float rounding would put it above."""
        p = math.exp(epsilon) / (1 + math.exp(epsilon))
        while abs(math.log(p / (1 - p))) > epsilon:  # float rounding: never above the target
            p = math.nextafter(p, 0.5)
        return cls(p=p, tau=tau)

    def probability(self, margin: float) -> float:
        """Probability that a record with this margin is queried."""
        return self.p if abs(margin) <= self.tau else 1.0 - self.p

    def epsilon(self) -> float:
        """True epsilon of one query decision (both outcomes)."""
        return abs(math.log(self.p / (1.0 - self.p)))


@dataclass(frozen=True)
class ExponentialRule:
    """Query with probability ``p * exp(-b * min(|margin|, bound))``.

    ``bound = R * M`` is the public margin bound. The "queried" outcome has log-ratio at most
    ``b * bound``; the "not queried" outcome ``log((1 - p e^{-b bound}) / (1 - p))``. The true
    epsilon is the larger of the two; :meth:`query_branch_epsilon` is the first alone, which is
    what an analysis that ignores the "not queried" outcome would charge.
    """

    p: float
    b: float
    bound: float

    def __post_init__(self) -> None:
        _check_probability("p", self.p)
        for name, value in (("b", self.b), ("bound", self.bound)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be finite and > 0, got {value}")

    @classmethod
    def for_epsilon(cls, p: float, bound: float, epsilon: float) -> ExponentialRule:
        """The steepest rule (largest ``b``) with true epsilon ``<= epsilon`` for this ``p``."""
        _check_probability("p", p)
        floor = math.log(1.0 / (1.0 - p))  # the non-query branch as b -> infinity
        b = epsilon / bound
        if floor > epsilon:
            b = -math.log((1.0 - (1.0 - p) * math.exp(epsilon)) / p) / bound
        return cls(p=p, b=min(b, epsilon / bound), bound=bound)

    def probability(self, margin: float) -> float:
        """Probability that a record with this margin is queried."""
        return self.p * math.exp(-self.b * min(abs(margin), self.bound))

    def query_branch_epsilon(self) -> float:
        """Log-ratio of the "queried" outcome only: an undercharge when used alone."""
        return self.b * self.bound

    def epsilon(self) -> float:
        """True epsilon of one query decision (both outcomes)."""
        low = self.p * math.exp(-self.b * self.bound)
        return max(self.b * self.bound, math.log((1.0 - low) / (1.0 - self.p)))


QueryRule = RandomizedResponseRule | ExponentialRule
