"""Exact distributed discrete Laplace: Pólya (negative-binomial) noise shares.

The discrete Laplace distribution ``DLap(q)``, ``P(k) ∝ q^|k|`` with
``q = exp(-epsilon / sensitivity)`` (``scale = sensitivity / epsilon``), is the difference of
two independent geometric variables ``NB(1, q)``. The negative binomial is infinitely
divisible: the sum of ``h`` independent ``NB(1/h, q)`` is ``NB(1, q)``. So if each of ``h``
parties adds the *share* ``NB(1/h, q) - NB(1/h, q)``, the sum of the ``h`` shares is exactly
``DLap(q)`` (Goryczka & Xiong, "A Comprehensive Comparison of Multiparty Secure Additions
with Differential Privacy", IEEE TDSC 2017; Harrison & Manurangsi, FORC 2025). With more
than ``h`` honest shares the noise is larger still (``NB(r, q)`` with ``r >= 1``).

Exact sampler
-------------
No floating point anywhere; every random choice is a uniform integer made exactly (by
rejection) from 64-bit words of ``secrets.token_bytes`` (the OS CSPRNG), and every
probability is a rational number. ``epsilon / sensitivity = n / d`` exactly (a Decimal
epsilon is a rational).

1. ``G ~ NB(1, q)``, the geometric ``P(G = k) = (1 - q) q^k``: ``X = U + d V`` with ``U``
   uniform on ``{0, .., d-1}`` accepted with probability ``exp(-U/d)`` and ``V`` geometric
   with ``P(V = v) ∝ exp(-v)``, so ``P(X = x) ∝ exp(-x/d)``; then ``G = floor(X / n)``
   (Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020,
   Algorithm 2). ``Bernoulli(exp(-a/b))`` for ``a/b <= 1`` is their Algorithm 1: the parity
   of the first ``K`` with ``Bernoulli(a/(b K)) = 0``.
2. ``NB(r, q)`` for rational ``0 < r <= 1`` by *thinning the cycles of a random
   permutation*. The geometric is compound Poisson: its probability generating function is
   ``(1-q)/(1-qz) = exp(-sum_k q^k/k (1 - z^k))``, i.e. independent ``Poisson(q^k / k)``
   numbers of jumps of size ``k``. Keeping each jump independently with probability ``r``
   gives ``exp(-r sum_k q^k/k (1 - z^k)) = ((1-q)/(1-qz))^r``, the pgf of ``NB(r, q)``.
   Given the total ``G = g``, the jump sizes are distributed as the cycle lengths of a
   uniform random permutation of ``g`` elements (Cauchy's formula; Arratia, Barbour &
   Tavaré, "Logarithmic Combinatorial Structures", EMS 2003, ch. 1), which the Feller
   coupling draws one cycle at a time: the cycle holding the first remaining element has a
   length uniform on ``{1, .., remaining}``. So: draw ``G``; split it into cycles; keep each
   cycle with probability ``r``; the kept total is ``NB(r, q)``. Expected cost is
   ``O(log G)`` random integers per share (about ``ln(scale)`` cycles).

The test suite checks the sum of ``h`` shares against the discrete Laplace pmf and each share
against the ``NB(1/h) - NB(1/h)`` pmf (``tests/common/test_noise.py``).
"""

from __future__ import annotations

import os
import secrets
import threading
from array import array
from decimal import Decimal
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

_WORDS = 4096
_TWO_64 = 1 << 64


class _WordPool:
    """64-bit words from ``secrets.token_bytes`` in blocks of 32 KiB (one system call per
    4096 words instead of one per draw). The pool is per process and per thread: it is
    emptied in a forked child so parent and child never reuse the same bytes."""

    def __init__(self) -> None:
        self._local = threading.local()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._local = threading.local()

    def word(self) -> int:
        words: list[int] | None = getattr(self._local, "words", None)
        if not words:
            block = array("Q")
            block.frombytes(secrets.token_bytes(8 * _WORDS))
            words = block.tolist()
            self._local.words = words
        return words.pop()


_POOL = _WordPool()


def _randbelow(n: int) -> int:
    """Uniform integer in ``[0, n)``, exactly: rejection of the top ``2**64 mod n`` words
    (larger ``n`` falls back to ``secrets.randbelow``)."""
    if n > _TWO_64 >> 1:
        return secrets.randbelow(n)
    limit = _TWO_64 - _TWO_64 % n
    while True:
        w = _POOL.word()
        if w < limit:
            return w % n


def _bernoulli_exp(a: int, b: int) -> bool:
    """``Bernoulli(exp(-a/b))`` for integers ``0 <= a <= b`` (CKS Algorithm 1)."""
    k = 1
    while _randbelow(b * k) < a:
        k += 1
    return k % 2 == 1


def sample_geometric(n: int, d: int) -> int:
    """``G`` with ``P(G = k) = (1 - q) q^k``, ``q = exp(-n/d)``, for integers ``n, d >= 1``."""
    while True:
        u = _randbelow(d)
        if not _bernoulli_exp(u, d):
            continue
        v = 0
        while _bernoulli_exp(1, 1):
            v += 1
        return (u + d * v) // n


def thin_cycles(g: int, keep_num: int, keep_den: int) -> int:
    """Total length of the kept cycles of a uniform random permutation of ``g`` elements,
    each cycle kept with probability ``keep_num / keep_den`` (Feller coupling)."""
    if keep_num == keep_den:
        return g
    kept = 0
    while g > 0:
        length = 1 + _randbelow(g)
        if _randbelow(keep_den) < keep_num:
            kept += length
        g -= length
    return kept


def sample_negative_binomial(n: int, d: int, r: Fraction) -> int:
    """``NB(r, q)``, ``P(k) = C(k + r - 1, k) (1 - q)^r q^k``, ``q = exp(-n/d)``,
    for rational ``0 < r <= 1``."""
    return thin_cycles(sample_geometric(n, d), r.numerator, r.denominator)


def noise_parameters(sensitivity: int, epsilon: Decimal | int | str) -> tuple[int, int]:
    """``(n, d)`` with ``epsilon / sensitivity = n / d`` in lowest terms (so ``q = e^{-n/d}``).

    Raises ``ValueError`` for a non-positive or non-finite epsilon or sensitivity < 1.
    """
    if isinstance(epsilon, float):
        raise ValueError("epsilon must be a Decimal, int or decimal string, not a float")
    eps = Decimal(str(epsilon)) if not isinstance(epsilon, Decimal) else epsilon
    if not eps.is_finite() or not eps > 0:
        raise ValueError(f"epsilon must be positive and finite, got {epsilon}")
    if isinstance(sensitivity, bool) or int(sensitivity) != sensitivity or sensitivity < 1:
        raise ValueError(f"sensitivity must be an integer >= 1, got {sensitivity}")
    ratio = Fraction(eps) / int(sensitivity)
    return ratio.numerator, ratio.denominator


def sample_noise_share(
    n_cells: int, sensitivity: int, epsilon: Decimal | int | str, h_min: int
) -> NDArray[np.int64]:
    """One party's noise share per cell: ``NB(1/h_min, q) - NB(1/h_min, q)``,
    ``q = exp(-epsilon / sensitivity)``.

    The sum of any ``h_min`` independent shares is exactly discrete Laplace with
    ``scale = sensitivity / epsilon``; ``h_min = 1`` gives the full discrete Laplace.
    Draw once per release and keep it (a second draw would be a second release).

    Parameters
    ----------
    n_cells : int
        Number of cells (independent shares).
    sensitivity : int
        L1 sensitivity of the summed vector (``m`` for LSH tables, 1 for a grid).
    epsilon : Decimal | int | str
        Privacy parameter the summed release must meet.
    h_min : int
        Number of honest parties whose shares are guaranteed to be in every revealed sum.
    """
    n, d = noise_parameters(sensitivity, epsilon)
    if isinstance(h_min, bool) or int(h_min) != h_min or h_min < 1:
        raise ValueError(f"h_min must be an integer >= 1, got {h_min}")
    if isinstance(n_cells, bool) or int(n_cells) != n_cells or n_cells < 0:
        raise ValueError(f"n_cells must be an integer >= 0, got {n_cells}")
    r = Fraction(1, int(h_min))
    out = [
        sample_negative_binomial(n, d, r) - sample_negative_binomial(n, d, r)
        for _ in range(int(n_cells))
    ]
    if out and max(abs(v) for v in out) >= 2**63:
        raise ValueError("noise exceeds int64; epsilon / sensitivity is too small")
    return np.array(out, dtype=np.int64).reshape(int(n_cells))
