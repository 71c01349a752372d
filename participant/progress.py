"""A minimal progress line on stderr (no dependency): rows (or other units) done, and percent
when known."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Rewrites one stderr line at most every ``interval`` seconds; silent when disabled."""

    def __init__(
        self,
        label: str,
        *,
        total: int | None = None,
        enabled: bool = True,
        stream: TextIO | None = None,
        interval: float = 0.5,
        unit: str = "rows",
    ) -> None:
        self.label = label
        self.unit = unit
        self.total = total
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.rows = 0
        self.fraction: float | None = None
        self._last = 0.0
        self._start = time.monotonic()

    def update(self, rows: int, *, fraction: float | None = None) -> None:
        """Add ``rows`` done; ``fraction`` overrides the percentage (e.g. bytes read)."""
        self.rows += rows
        if fraction is not None:
            self.fraction = fraction
        elif self.total:
            self.fraction = self.rows / self.total
        now = time.monotonic()
        if self.enabled and now - self._last >= self.interval:
            self._last = now
            self._draw()

    def _draw(self, end: str = "") -> None:
        pct = f" {min(self.fraction, 1.0) * 100:5.1f}%" if self.fraction is not None else ""
        rate = self.rows / max(time.monotonic() - self._start, 1e-9)
        self.stream.write(f"\r{self.label}:{pct} {self.rows:,} {self.unit} "
                          f"({rate:,.0f} {self.unit}/s){end}")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            if self.total or self.fraction is not None:
                self.fraction = 1.0
            self._draw(end="\n")
