"""The delta floor: the one rule every (epsilon, delta) release of a study obeys.

A delta is the probability that a release's epsilon guarantee fails outright; it must be far
below the chance of singling out one of the study's records. Every delta a config produces
is checked against one public ceiling, :data:`MAX_RELEASE_DELTA`, when the config is
validated (so a study whose delta would mean nothing is refused at creation):

- a sparse grid's ``delta_grid`` (thresholded Laplace, per release);
- an online study's ``delta_gradient`` (Gaussian gradient sums, per release);
- a cohort study's Gaussian sums: the whole study's ``1 / (n sqrt n)`` for ``declared_n``
  (split over its rounds), hence ``declared_n >= MIN_DECLARED_N``.

``declared_n = 2`` used to give delta 0.35 for the study (0.03 at n = 10).
"""

from __future__ import annotations

from decimal import Decimal

__all__ = ["MAX_RELEASE_DELTA", "MIN_DECLARED_N", "check_delta", "min_declared_n"]

MAX_RELEASE_DELTA = Decimal("0.0001")
"""Largest delta a config may give one release (or, for cohorts, the whole study)."""


def min_declared_n(ceiling: Decimal = MAX_RELEASE_DELTA) -> int:
    """Smallest ``n`` with ``1 / (n sqrt n) <= ceiling``, i.e. ``n**3 * ceiling**2 >= 1``."""
    def enough(n: int) -> bool:
        return Decimal(n) ** 3 * ceiling**2 >= 1

    n = max(2, int((1 / ceiling) ** (Decimal(2) / 3)) + 2)
    while n > 2 and enough(n - 1):
        n -= 1
    while not enough(n):
        n += 1
    return n


MIN_DECLARED_N = min_declared_n()
"""Smallest ``declared_n`` a cohort study with Gaussian noise may declare (465)."""


def check_delta(delta: Decimal, what: str) -> Decimal:
    """``delta`` if it is at most :data:`MAX_RELEASE_DELTA`, else ``ValueError`` naming it."""
    if delta > MAX_RELEASE_DELTA:
        raise ValueError(
            f"{what} {delta} exceeds the delta ceiling {MAX_RELEASE_DELTA}: a delta that "
            "large makes the (epsilon, delta) guarantee meaningless (about 1e-6 is usual)"
        )
    return delta
