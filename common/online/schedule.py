"""A schedule window's single release: its queried slots as one batch, unused slots padded.

Under the public schedule (:class:`common.online.params.OnlineParams`: ``window_slots`` slots
per calendar window) a stream makes exactly one gradient release per window, when the window
ends. Its batch holds every queried slot of the window:

- a real record that was queried and labelled adds its hinge subgradient;
- a real record that was queried but not answered before the window ended adds a zero
  gradient (it still counts: the count must not reveal whether the reviewer answered);
- every unused slot holds the *empty record* (the zero vector): margin 0, so it is queried
  with probability ``q(0)``, and its gradient is 0. Only the number of queried empty slots
  matters, drawn here with exact CSPRNG coins.

The batch's count is therefore the number of queried slots, a function of the private query
decisions only, and the number and times of releases are functions of the schedule only.

The centring window (``OnlineParams.centre_window``) releases instead the sum of its slots'
records (:func:`centre_batch`): no slot is queried, unused slots add the empty record (zero),
so its count is the window's public number of slots. One slot's record against the empty
record moves the sum by at most ``M``: the sensitivity its noise is set for.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numpy.typing import NDArray

from common.online.learner import hinge_gradient, project_rows
from common.online.query import QueryRule, bernoulli_count

__all__ = ["centre_batch", "pad_queries", "window_batch"]

Vector = NDArray[np.float64]


def pad_queries(rule: QueryRule, empty: int) -> int:
    """Number of ``empty`` unused slots (empty records, margin 0) the rule queries."""
    if empty < 0:
        raise ValueError(f"empty slots must be >= 0, got {empty}")
    return bernoulli_count(rule.probability(0.0), empty)


def window_batch(w: Vector, queried: Iterable[tuple[Vector, int | None]], empty: int,
                 rule: QueryRule) -> tuple[Vector, int]:
    """Exact gradient sum and count of a window's batch (before noise).

    ``queried`` holds ``(record in the ball, label or None)`` for the window's queried real
    slots (label +1/-1, or None when the reviewer did not answer in time: zero gradient);
    ``empty`` is the number of unused slots, padded with empty records.
    """
    total = np.zeros_like(w)
    count = 0
    for z, label in queried:
        count += 1
        if label is not None:
            total = total + hinge_gradient(w, z, label)
    return total, count + pad_queries(rule, empty)


def centre_batch(records: Iterable[Vector], dim: int, slots: int, radius: float
                 ) -> tuple[Vector, int]:
    """Exact sum and count of the centring window's release (before noise): the records of
    its used slots, each projected into the ball of ``radius`` (a no-op for records already
    there; it makes the ``M`` bound hold for any input), plus ``slots - len(records)``
    empty records (zero). The count is ``slots``: public."""
    rows = [np.asarray(r, dtype=np.float64) for r in records]
    if len(rows) > slots:
        raise ValueError(f"{len(rows)} records for a window of {slots} slots")
    if not rows:
        return np.zeros(dim), slots
    return np.asarray(project_rows(np.stack(rows), radius).sum(axis=0)), slots
