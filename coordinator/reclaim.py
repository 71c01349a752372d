"""Give the memory of dropped request bodies back to the operating system, at a bounded rate.

A stalled upload that is dropped (408) leaves the body read so far in the handler's exception
chain, a reference cycle that only the cyclic garbage collector frees, and glibc keeps freed
heap pages mapped. Measured against a real worker: 100 stalled bodies of 1 MiB kept about
105 MiB resident for good; ``gc.collect()`` alone or ``malloc_trim`` alone freed nothing
visible, both together returned it. :class:`Reclaimer` runs both once the dropped exchange
has ended, at most once per ``min_interval_s`` (requests in between are coalesced into one
run at the end of the interval), so an attacker cannot turn stalls into a collection loop.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
import os
import time
from collections.abc import Callable

log = logging.getLogger("fedod.reclaim")


def _malloc_trim() -> Callable[[], object] | None:
    """glibc's ``malloc_trim(0)``, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None)
    return None if trim is None else lambda: trim(0)


class Reclaimer:
    """Coalesced ``gc.collect()`` + ``malloc_trim(0)`` on an event loop."""

    def __init__(self, min_interval_s: float) -> None:
        self.min_interval_s = min_interval_s
        self.dropped = 0
        self._covered = 0
        self._last = float("-inf")
        self._pending = False
        self._trim = _malloc_trim()

    def request(self) -> None:
        """Count one dropped body; reclaim at the next loop turn or when the interval ends.

        Every request is followed by a run that starts after it (a pending run covers it).
        """
        self.dropped += 1
        if self._pending:
            return
        self._pending = True
        wait = max(0.0, self._last + self.min_interval_s - time.monotonic())
        asyncio.get_running_loop().call_later(wait, self._run)

    def _run(self) -> None:
        self._pending = False
        self._last = time.monotonic()
        dropped, self._covered = self.dropped - self._covered, self.dropped
        gc.collect()
        if self._trim is not None:
            self._trim()
        log.info(
            "freed the memory of %d dropped request bodies (%d so far)", dropped, self.dropped,
            extra={"dropped_bodies": self.dropped, "pid": os.getpid()},
        )
