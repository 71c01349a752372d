"""Tree aggregation: private prefix sums of a stream of gradient sums (the noise of DP-FTRL).

Dwork, Naor, Pitassi & Rothblum (2010) and Chan, Shi & Song (2011) release the running sums
of a stream through a binary tree; Guha Thakurta & Smith (2013) and Kairouz et al., "Practical
and Private (Deep) Learning without Sampling or Shuffling" (DP-FTRL, ICML 2021) learn from
them. Leaf ``t`` (1-based) is one batch's exact gradient sum. When it arrives, every node of
the tree that it completes is released, each with one fresh Gaussian draw: the nodes ending
at leaf ``t`` at levels ``0 .. log2(lowbit(t))`` (``lowbit``: the largest power of two
dividing ``t``; a level-``j`` node sums ``2^j`` leaves). Each node's sum is then estimated
bottom-up from its own noisy value and its two children's estimates, weighted by inverse
variance (Honaker, "Efficient use of differentially private binary trees", 2015, the part
that needs no later node): the estimate's variance falls from one node's ``sigma^2`` at the
leaves towards ``sigma^2 / 2``. The prefix sum is

    P~_t = P~_{t - lowbit(t)} + estimate(node ending at t at level log2(lowbit(t))),

the sum of the estimates of the ``popcount(t)`` nodes of ``t``'s binary decomposition.

Sensitivity. A record's gradient (norm at most ``C``, the clip radius) sits in one leaf; in a
tree of ``L = 2^k`` leaves, a leaf lies in at most ``k + 1 = height`` of the released nodes
(one per level). The record against the empty record (one slot, :mod:`common.online.params`)
moves each of those node sums by at most ``C`` and no
other node. Later leaves depend on the record only through released nodes (the weights are
computed from them), so the whole sequence is an adaptive composition of ``height`` Gaussian
mechanisms of sensitivity ``C`` each: ``rho = height C^2 / (2 sigma^2)``-zCDP, exactly
one Gaussian of sensitivity ``C sqrt(height)`` at the node scale ``sigma``. :func:`tree_noise`
sets ``sigma`` with OpenDP's zCDP -> (epsilon, delta) conversion
(:func:`common.noise.gradient.gaussian_scale`) so the whole tree costs ``(epsilon, delta)``
per record. The noise itself is OpenDP's Gaussian sampler (exact, from a CSPRNG), drawn once
per node and kept: the noisy prefix sums are post-processing of the stored nodes.

After ``L`` leaves the tree is full: its noisy total (the root) becomes the base of the next
tree, which starts empty. A record sits in one tree only, so the charge does not grow with
the stream; the noise of the prefix sum after ``m`` full trees is ``m`` root estimates plus
the current tree's (variance at most ``(m + popcount(t)) sigma^2`` per coordinate).
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

__all__ = ["TreeAggregator", "lowbit", "node_weights", "tree_height", "tree_noise"]

Vector = NDArray[np.float64]


def lowbit(t: int) -> int:
    """The largest power of two that divides ``t >= 1``: the leaves the new node sums."""
    if t < 1:
        raise ValueError(f"leaf index must be >= 1, got {t}")
    return t & -t


def tree_height(leaves: int) -> int:
    """Released nodes a leaf can lie in, for a tree of ``leaves`` (a power of two) leaves."""
    if leaves < 1 or leaves & (leaves - 1):
        raise ValueError(f"leaves per tree must be a power of two >= 1, got {leaves}")
    return leaves.bit_length()


def tree_noise(clip: float, epsilon: float, delta: float, leaves: int) -> GradientNoise:
    """Node noise of a tree of ``leaves`` leaves over gradients of norm at most ``clip``:
    ``height`` nodes of sensitivity ``clip`` compose (zCDP) to one Gaussian of sensitivity
    ``clip sqrt(height)``, calibrated to ``(epsilon, delta)`` (plus a relative 1e-9 for
    float rounding, as :func:`common.noise.gradient.make_gradient_noise`)."""
    from common.noise.gradient import GradientNoise, make_gradient_noise

    base = make_gradient_noise(clip, epsilon, delta)
    return GradientNoise(base.sensitivity * math.sqrt(tree_height(leaves)), epsilon, delta)


def node_weights(height: int) -> list[float]:
    """``v_j``: variance (in units of one node's) of the bottom-up estimate of a level-``j``
    node, and the weight of its own noisy value in that estimate (``v_0 = 1``,
    ``v_j = 2 v_{j-1} / (2 v_{j-1} + 1)``, tending to 1/2)."""
    v = [1.0]
    for _ in range(1, height):
        v.append(2 * v[-1] / (2 * v[-1] + 1))
    return v


class TreeAggregator:
    """Noisy prefix sums of a stream of leaf vectors (``noise=None``: exact, non-private)."""

    def __init__(self, dim: int, leaves: int, noise: GradientNoise | None) -> None:
        self.leaves = leaves
        self.height = tree_height(leaves)
        self.noise = noise
        self._v = node_weights(self.height)
        self.base_: Vector = np.zeros(dim)  # estimated totals of the full trees
        self._exact: list[Vector] = []  # this tree's exact leaf sums (never released)
        self._est: dict[tuple[int, int], Vector] = {}  # (level, last leaf) -> estimate
        self._prefix: list[Vector] = [np.zeros(dim)]  # P~_0 .. P~_t of this tree
        self.total_: Vector = np.zeros(dim)  # the last prefix sum returned

    def variance(self, leaves: int) -> float:
        """Per-coordinate noise variance of the prefix sum after ``leaves`` leaves in all, in
        units of the node scale squared (public): the full trees' root estimates and the
        current tree's node estimates of ``leaves``' binary decomposition."""
        full, rest = divmod(leaves, self.leaves)
        return full * self._v[-1] + sum(v for j, v in enumerate(self._v) if rest >> j & 1)

    @property
    def t(self) -> int:
        """Leaves of the current tree so far."""
        return len(self._exact)

    def _release(self, level: int, t: int) -> Vector:
        """Release the node of ``level`` ending at leaf ``t`` (its exact sum plus one draw)
        and return its bottom-up estimate (weighted with its children's estimates)."""
        exact = np.asarray(np.sum(self._exact[t - 2 ** level:t], axis=0), dtype=np.float64)
        noisy = exact if self.noise is None else self.noise.release(exact)
        if level == 0:
            return noisy
        half = 2 ** (level - 1)
        children = self._est[(level - 1, t - half)] + self._est[(level - 1, t)]
        return np.asarray(self._v[level] * noisy + (1 - self._v[level]) * children)

    def add(self, leaf: Vector) -> Vector:
        """Take the next leaf; release the nodes it completes (each noised once); return
        the estimated prefix sum of every leaf so far."""
        self._exact.append(np.asarray(leaf, dtype=np.float64))
        t = self.t
        for level in range(lowbit(t).bit_length()):
            self._est[(level, t)] = self._release(level, t)
        top = self._est[(lowbit(t).bit_length() - 1, t)]
        prefix = self._prefix[t - lowbit(t)] + top
        self._prefix.append(prefix)
        total = self.total_ = self.base_ + prefix
        if t == self.leaves:  # full: its root is the next tree's base
            self.base_ = total
            self._exact, self._est, self._prefix = [], {}, [np.zeros_like(prefix)]
        return total

    def increment(self, leaf: Vector) -> Vector:
        """:meth:`add`, returning how much the prefix sum moved (``P~_t - P~_{t-1}``): what a
        member of a federated stream releases (the members' increments add up to the sum
        of their prefix sums)."""
        before = self.total_
        return np.asarray(self.add(leaf) - before, dtype=np.float64)

    def to_json(self) -> str:
        """The state, exact leaf sums included: kept by the participant only (its stream
        file), so that a restart goes on with the same noisy nodes, never redrawn."""
        def enc(v: Vector) -> str:
            return encode_vector(v)
        return json.dumps({"leaves": self.leaves, "base": enc(self.base_),
                           "total": enc(self.total_), "exact": [enc(v) for v in self._exact],
                           "est": [[j, t, enc(v)] for (j, t), v in self._est.items()],
                           "prefix": [enc(v) for v in self._prefix]})

    @classmethod
    def from_json(cls, text: str | None, dim: int, leaves: int,
                  noise: GradientNoise | None) -> TreeAggregator:
        """A tree from :meth:`to_json` (``None``: a new one); its shape must match."""
        tree = cls(dim, leaves, noise)
        if text is None:
            return tree
        doc = json.loads(text)
        if doc["leaves"] != leaves:
            raise ValueError(f"stored tree has {doc['leaves']} leaves, the config {leaves}")
        tree.base_, tree.total_ = decode_vector(doc["base"], dim), decode_vector(doc["total"], dim)
        tree._exact = [decode_vector(v, dim) for v in doc["exact"]]
        tree._est = {(j, t): decode_vector(v, dim) for j, t, v in doc["est"]}
        tree._prefix = [decode_vector(v, dim) for v in doc["prefix"]]
        return tree
