"""Square-root matrix factorisation: private prefix sums with less early noise than the tree.

The prefix-sum matrix ``A`` (lower-triangular ones, ``n x n``) is written ``A = B C`` with
``B = C = A^{1/2}``, the lower-triangular Toeplitz matrix whose diagonals are the
coefficients of ``(1 - x)^{-1/2}``:

    c_0 = 1,   c_k = c_{k-1} (2k - 1) / (2k)      (c_k = binom(2k, k) / 4^k ~ 1 / sqrt(pi k)).

Fichtenberger, Henzinger & Upadhyay, "Constant matters: fine-grained error bounds on
differentially private continual observation" (ICML 2023) show this factorisation is within
``1 + o(1)`` of the best linear mechanism for continual prefix sums (mean and max error);
Choquette-Choo et al. (2023) and McMahan et al. (BLT, 2024) optimise banded / buffered
variants for many participations. Here each record sits in one leaf (one participation), the
case the square root is made for. ``C`` and ``B`` depend only on the public horizon ``n``
(pure numpy, nothing private).

Leaf ``t`` (1-based) is one batch's exact gradient sum ``x_t``. When it arrives one vector is
released, ``y_t = sum_{i <= t} c_{t-i} x_i + z_t`` (``z_t`` one fresh OpenDP Gaussian draw per
coordinate, kept), and the prefix sum is estimated as ``P~_t = sum_{j <= t} c_{t-j} y_j``
(post-processing): ``P~_t = x_1 + .. + x_t + (B z)_t``, per-coordinate noise variance
``sigma^2 sum_{k < t} c_k^2`` (:func:`prefix_variance`), which grows like ``log t / pi``
where the tree's grows like ``log2(horizon) x popcount(t)``.

Sensitivity. One slot's record against the empty record (the system's add/remove unit,
:mod:`common.online.params`) moves one leaf ``x_i`` by at most ``C`` (the clip radius)
and so the releases ``y_j, j >= i``, by ``C c_{j-i}``: in l2 over the whole block at most
``C sqrt(sum_{k < n} c_k^2)`` (:func:`column_norm`: the largest column norm of ``C``). Later
leaves depend on the record only through earlier releases; for a lower-triangular ``C`` the
adaptive stream is as private as a fixed one (Denisov, McMahan, Rush, Smith & Thakurta,
NeurIPS 2022, Theorem 2.1), and the releases compose in zCDP to ``rho = (C |C|_col)^2 /
(2 sigma^2)``: one Gaussian of sensitivity ``C |C|_col``. :func:`factor_noise` sets
``sigma`` with OpenDP's zCDP -> (epsilon, delta) conversion so the whole block costs
``(epsilon, delta)`` per record.

After ``n`` leaves the block is full: its noisy total becomes the next block's base and a new
block starts (a record sits in one block only, so the charge does not grow with the stream).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from common.online.vectors import decode_vector, encode_vector

if TYPE_CHECKING:  # OpenDP takes about a second to import
    from common.noise.gradient import GradientNoise
    from common.online.tree import TreeAggregator

__all__ = ["SqrtAggregator", "column_norm", "factor_noise", "prefix_sums", "prefix_variance",
           "sqrt_coefficients"]

Vector = NDArray[np.float64]


def sqrt_coefficients(n: int) -> Vector:
    """``c_0 .. c_{n-1}``: the diagonals of ``A^{1/2}`` (public, from ``n`` alone)."""
    if n < 1:
        raise ValueError(f"horizon must be >= 1, got {n}")
    c = np.ones(n)
    for k in range(1, n):
        c[k] = c[k - 1] * (2 * k - 1) / (2 * k)
    return c


def column_norm(n: int) -> float:
    """Largest column norm of ``C = A^{1/2}`` (its first column), rounded up by a relative
    1e-12 so that float summation can never understate the sensitivity."""
    return math.sqrt(float(np.sum(sqrt_coefficients(n) ** 2))) * (1 + 1e-12)


def prefix_variance(t: int, n: int) -> float:
    """Per-coordinate noise variance of ``P~_t`` in units of ``sigma^2``: ``m`` full blocks
    (their totals, ``|C|_col^2`` each) plus ``sum_{k < r} c_k^2`` (``t = m n + r``)."""
    c2 = sqrt_coefficients(n) ** 2
    full, rest = divmod(t, n)
    return float(full * np.sum(c2) + np.sum(c2[:rest]))


def factor_noise(clip: float, epsilon: float, delta: float, horizon: int) -> GradientNoise:
    """Release noise of a block of ``horizon`` leaves over gradients of norm at most ``clip``:
    one Gaussian of sensitivity ``clip |C|_col`` at ``(epsilon, delta)`` (the 1e-9 float
    slack of :func:`common.noise.gradient.make_gradient_noise` included)."""
    from common.noise.gradient import GradientNoise, make_gradient_noise

    base = make_gradient_noise(clip, epsilon, delta)
    return GradientNoise(base.sensitivity * column_norm(horizon), epsilon, delta)


class SqrtAggregator:
    """Noisy prefix sums of a stream of leaf vectors by ``A = A^{1/2} A^{1/2}`` (``noise=None``:
    exact, non-private). Same interface as :class:`common.online.tree.TreeAggregator`."""

    kind = "sqrt"

    def __init__(self, dim: int, horizon: int, noise: GradientNoise | None) -> None:
        self.horizon, self.noise = horizon, noise
        self._c = sqrt_coefficients(horizon)
        self.base_: Vector = np.zeros(dim)  # noisy totals of the full blocks
        self._exact: list[Vector] = []  # this block's exact leaf sums (never released)
        self._released: list[Vector] = []  # this block's releases y_1 .. y_t
        self.total_: Vector = np.zeros(dim)  # the last prefix sum returned

    @property
    def t(self) -> int:
        """Leaves of the current block so far."""
        return len(self._exact)

    def variance(self, leaves: int) -> float:
        """Per-coordinate noise variance of the prefix sum after ``leaves`` leaves in all, in
        units of the release scale squared (public)."""
        return prefix_variance(leaves, self.horizon)

    def _mix(self, rows: list[Vector]) -> Vector:
        """``sum_{i <= t} c_{t-i} rows_i`` for the last row ``t``."""
        weights = self._c[:len(rows)][::-1]
        return np.asarray(weights @ np.stack(rows), dtype=np.float64)

    def add(self, leaf: Vector) -> Vector:
        """Take the next leaf; release ``y_t`` (noised once); return the estimated prefix sum
        of every leaf so far."""
        self._exact.append(np.asarray(leaf, dtype=np.float64))
        exact = self._mix(self._exact)
        self._released.append(exact if self.noise is None else self.noise.release(exact))
        total = self.total_ = self.base_ + self._mix(self._released)
        if self.t == self.horizon:  # full: its noisy total is the next block's base
            self.base_ = total
            self._exact, self._released = [], []
        return total

    def increment(self, leaf: Vector) -> Vector:
        """:meth:`add`, returning how much the prefix sum moved (``P~_t - P~_{t-1}``)."""
        before = self.total_
        return np.asarray(self.add(leaf) - before, dtype=np.float64)

    def to_json(self) -> str:
        """The state, exact leaf sums included: kept by the participant only (its stream
        file), so that a restart goes on with the same releases, never redrawn."""
        return json.dumps({"kind": self.kind, "horizon": self.horizon,
                           "base": encode_vector(self.base_), "total": encode_vector(self.total_),
                           "exact": [encode_vector(v) for v in self._exact],
                           "released": [encode_vector(v) for v in self._released]})

    @classmethod
    def from_json(cls, text: str | None, dim: int, horizon: int,
                  noise: GradientNoise | None) -> SqrtAggregator:
        """An aggregator from :meth:`to_json` (``None``: a new one); its shape must match."""
        agg = cls(dim, horizon, noise)
        if text is None:
            return agg
        doc = json.loads(text)
        if doc.get("kind") != cls.kind or doc["horizon"] != horizon:
            raise ValueError(f"stored prefix-sum state is not a square-root factorisation of "
                             f"horizon {horizon} (the config changed its prefix noise)")
        agg.base_, agg.total_ = decode_vector(doc["base"], dim), decode_vector(doc["total"], dim)
        agg._exact = [decode_vector(v, dim) for v in doc["exact"]]
        agg._released = [decode_vector(v, dim) for v in doc["released"]]
        return agg


def prefix_sums(kind: str, dim: int, size: int, noise: GradientNoise | None,
                text: str | None = None) -> SqrtAggregator | TreeAggregator:
    """The prefix-sum mechanism of a config (``"sqrt"``: :class:`SqrtAggregator` over blocks
    of ``size`` leaves; ``"tree"``: :class:`~common.online.tree.TreeAggregator` of ``size``
    leaves), new or restored from its stored state ``text``."""
    if kind == "sqrt":
        return SqrtAggregator.from_json(text, dim, size, noise)
    if kind == "tree":
        from common.online.tree import TreeAggregator

        if text is not None and "leaves" not in json.loads(text):
            raise ValueError("stored prefix-sum state is not a tree (the config changed its "
                             "prefix noise)")
        return TreeAggregator.from_json(text, dim, size, noise)
    raise ValueError(f"prefix noise must be 'sqrt' or 'tree', got {kind!r}")
