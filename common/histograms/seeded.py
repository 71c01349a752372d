"""Public randomness and public boxes: what every participant derives identically from a seed.

:class:`Sha256Stream` reads uniform floats from SHA-256 in counter mode: block ``t`` is
``sha256(key || t as 8-byte little-endian)``, read as little-endian 64-bit words, and a
uniform float in ``[0, 1)`` is ``u = (word >> 11) * 2**-53``. It uses nothing of numpy's
``Generator`` distributions, so the draws do not depend on the numpy version. The LSH family
(:mod:`common.histograms.hashing`) and the k-means seeding (:mod:`common.cohorts.kmeans`) read it;
the draws are public (privacy comes from the noise, never from the hashing).

:func:`as_bounds` checks the public box ``[lo, hi]`` a study declares.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["Sha256Stream", "as_bounds"]


class Sha256Stream:
    """Uniform floats from SHA-256 in counter mode (53-bit resolution)."""

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._counter = 0
        self._words: list[int] = []

    def uniform(self) -> float:
        if not self._words:
            block = hashlib.sha256(self._key + self._counter.to_bytes(8, "little")).digest()
            self._counter += 1
            self._words = list(struct.unpack("<4Q", block))[::-1]
        return (self._words.pop() >> 11) * 2.0**-53

    def between(self, a: float, b: float) -> float:
        return a + (b - a) * self.uniform()

    def below(self, n: int) -> int:
        """Integer in ``[0, n)`` as ``floor(u * n)``; bias at most ``n / 2**53``."""
        return min(int(self.uniform() * n), n - 1)


def as_bounds(lo: ArrayLike, hi: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Public box bounds as read-only float64 vectors (``ValueError`` unless non-empty, of
    equal length, finite and ``lo <= hi``)."""
    lo_a = np.array(lo, dtype=np.float64).ravel()
    hi_a = np.array(hi, dtype=np.float64).ravel()
    if lo_a.shape != hi_a.shape or lo_a.size == 0:
        raise ValueError(f"lo and hi must be non-empty and of equal length, got {lo_a.shape}"
                         f" and {hi_a.shape}")
    if not (np.all(np.isfinite(lo_a)) and np.all(np.isfinite(hi_a))):
        raise ValueError("bounds must be finite")
    if np.any(lo_a > hi_a):
        raise ValueError("every lower bound must be <= its upper bound")
    lo_a.setflags(write=False)
    hi_a.setflags(write=False)
    return lo_a, hi_a
