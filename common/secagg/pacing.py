"""How often a member re-reads the round state while it waits (public, data-independent).

A member reads ``GET .../rounds/current`` at ``start`` seconds after anything it can see
changed (a new phase, attempt or round, or its own message accepted), then doubles the pause
while the state stays the same, up to ``cap``. Both depend only on the signed cohort size
``n`` and the ``poll`` the operator asked for, never on the data:

- ``start = max(poll, n / 1000)``: right after a change the whole cohort asks at most about
  1,000 times a second (``n / start``), and once per ``poll`` in a small cohort;
- ``cap = max(start, n / 25)``: a cohort that is waiting (on a slow member, or the administrator)
  asks about 25 times a second in all (``n / cap``), whatever ``n``; a member notices a change
  at most ``cap`` seconds late (40 s at ``n = 1,000``, 2 s at ``n = 50``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Pacing"]

BURST_PER_SECOND = 1000
"""Requests per second the whole cohort sends right after a change, at most (``n / start``)."""
IDLE_PER_SECOND = 25
"""Requests per second the whole cohort sends while nothing changes, at most (``n / cap``)."""


@dataclass
class Pacing:
    """The pause before the next read of the round state (doubling while unchanged)."""

    start: float
    cap: float
    pause: float = 0.0
    _last: object = None

    @classmethod
    def for_cohort(cls, n: int, poll: float) -> Pacing:
        if poll <= 0:
            raise ValueError(f"poll must be positive, got {poll}")
        start = max(poll, n / BURST_PER_SECOND)
        return cls(start=start, cap=max(start, n / IDLE_PER_SECOND), pause=start)

    def next(self, seen: object) -> float:
        """The pause after a read that returned ``seen`` (anything comparable): ``start`` when
        it differs from the previous read, else twice the previous pause up to ``cap``."""
        if seen != self._last:
            self._last, self.pause = seen, self.start
        else:
            self.pause = min(self.cap, 2 * self.pause)
        return self.pause
