"""The masking graph of a round: who masks with whom, and who holds shares of whose seed.

SecAgg+ (Bell, Bonawitz, Gascón, Lepoint, Raykova, CCS 2020): every member masks with, and
shares its self-mask seed among, only its ``k`` neighbours in a Harary graph ``H(k, R)`` over
a random permutation of the roster's ``R`` members, instead of all ``R - 1`` others.

**Public randomness, fixed after the roster.** The permutation is read from ChaCha20 keyed by
``SHA-256("fedod-secagg/graph/1" NUL roster digest)``: the roster digest is the SHA-256 of the
coordinator-signed roster (round, attempt, every member's advert with its fresh X25519 key),
so neither the coordinator nor a member chooses a neighbour, and every member who holds the
roster computes the same graph. A coordinator could still *grind*: sign many candidate rosters
(other subsets of the members that posted keys, or colluders' adverts re-drawn) and keep one
it likes; every bound below is per drawn graph. So wherever the bound is not 0 the seed also
takes the consortium key's signature over the roster digest (:mod:`common.secagg.beacon`),
which the coordinator cannot predict and gets at most ``A`` of per round (docs/TRUST.md).

**The graph.** Members sit on a cycle in permuted order; each is a neighbour of the ``k / 2``
nearest on either side (``k`` even, so every member has exactly ``k`` neighbours and the graph
is symmetric). When ``k >= R - 1`` the graph is complete, as before (small cohorts).

**Degree** (:func:`graph_degree`). After removing the colluders, the honest members of a cycle
graph with reach ``k / 2`` are disconnected only if two separate runs of ``k / 2`` consecutive
cycle positions are all colluders (between two honest members at cycle distance ``<= k / 2``
there is an edge, so a break needs a run of at least ``k / 2`` colluders, and a cycle breaks
into two parts only at two places). With ``T`` colluders placed by a uniform permutation, a
fixed set of ``k`` positions is all colluders with probability ``(T)_k / (R)_k`` (falling
factorials), and there are fewer than ``R**2 / 2`` pairs of runs:

    P(honest members disconnected) <= R**2 / 2 * (T)_k / (R)_k

which is exactly 0 when ``T < k``. ``k`` is the smallest even degree for which ``G`` times this
(:data:`~common.secagg.draws.BEACON_DRAWS`: a release masks under one of at most ``G`` beacon
draws, and is charged for all of them) is at most :data:`GRAPH_FAILURE` (``2**-40``) for every
roster size ``R`` in ``[n - D, n]``. A member whose
neighbours are all colluders is a special case (the honest graph is then disconnected).

**Share threshold** (:func:`share_threshold`). See :class:`common.secagg.params` and
docs/TRUST.md: ``t = min(T + D, floor(k (T + D) / (n - 2D - T))) + 1`` keeps two attempts of a
round from both being revealed.
"""

from __future__ import annotations

import functools
import hashlib
from fractions import Fraction

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from common.secagg.beacon import beacon_seed
from common.secagg.draws import BEACON_DRAWS

__all__ = [
    "GRAPH_FAILURE",
    "graph_degree",
    "share_threshold",
    "disconnect_bound",
    "MaskingGraph",
    "graph_seed",
    "graph_delta",
]

GRAPH_FAILURE = Fraction(1, 2**40)
"""Largest allowed probability, per release (over the at most ``G`` graphs it may be drawn
among), that the honest members' graph is disconnected (some honest member's vector, or the
sum of a part of them, exposed)."""


def _falling(x: int, k: int) -> int:
    out = 1
    for i in range(k):
        out *= x - i
    return out


def disconnect_bound(roster: int, colluders: int, degree: int) -> Fraction:
    """``R**2 / 2 * (T)_k / (R)_k``: the bound above (1 when it says nothing)."""
    if degree >= roster - 1:
        return Fraction(0)  # complete graph: the honest members are always connected
    if colluders < degree:
        return Fraction(0)
    bound = Fraction(roster * roster, 2) * Fraction(_falling(colluders, degree),
                                                    _falling(roster, degree))
    return min(bound, Fraction(1))


@functools.cache
def graph_degree(n: int, dropouts: int, colluders: int) -> int:
    """The public degree ``k`` of a study's masking graph from its signed ``(n, D, T)``: the
    smallest even ``k`` with ``G`` times the disconnection bound at most :data:`GRAPH_FAILURE`
    for every roster size and a share threshold of at most ``3k / 4`` (a lost member's seed is
    recovered while at least ``t`` of its ``k`` neighbours answer); ``n - 1`` (complete) when
    none below the smallest roster qualifies."""
    rosters = range(max(n - dropouts, 2), n + 1)
    k = 2
    while k < min(rosters) - 1:
        if (4 * share_threshold(n, dropouts, colluders, k) <= 3 * k
                and all(BEACON_DRAWS * disconnect_bound(r, colluders, k) <= GRAPH_FAILURE
                        for r in rosters)):
            return k
        k += 2
    return n - 1


def share_threshold(n: int, dropouts: int, colluders: int, degree: int) -> int:
    """``t = min(T + D, floor(k (T + D) / (n - 2D - T))) + 1`` (at most ``degree``)."""
    spare = n - 2 * dropouts - colluders
    helpers = colluders + dropouts
    bound = helpers if spare < 1 else min(helpers, degree * helpers // spare)
    return min(bound + 1, degree)


@functools.cache
def graph_delta(n: int, dropouts: int, colluders: int) -> Fraction:
    """The largest disconnection bound over the roster sizes ``[n - D, n]`` at the study's
    degree: the probability, per round, that some honest member's vector (or the sum of a part
    of the honest members) is exposed; charged as delta with every secure release."""
    k = graph_degree(n, dropouts, colluders)
    return max(disconnect_bound(r, colluders, k) for r in range(max(n - dropouts, 2), n + 1))


def graph_seed(roster_digest: str, beacon: bytes | None = None) -> bytes:
    """The ChaCha20 key of the cycle order: from the roster digest, and in a beacon study
    from the consortium's signature over it too (:func:`common.secagg.beacon.beacon_seed`)."""
    if beacon is not None:
        return beacon_seed(roster_digest, beacon)
    return hashlib.sha256(b"fedod-secagg/graph/1\x00" + bytes.fromhex(roster_digest)).digest()


class MaskingGraph:
    """The graph over ``names`` (sorted roster names) for the roster ``roster_digest`` (and
    its consortium ``beacon`` signature, in a beacon study)."""

    def __init__(self, names: list[str], roster_digest: str, degree: int,
                 beacon: bytes | None = None) -> None:
        self.names = names
        size = len(names)
        self.complete = degree >= size - 1
        self.degree = size - 1 if self.complete else degree
        if not self.complete and (degree < 2 or degree % 2):
            raise ValueError(f"a sparse masking graph has an even degree >= 2, got {degree}")
        stream = Cipher(algorithms.ChaCha20(graph_seed(roster_digest, beacon), bytes(16)),
                        mode=None).encryptor().update(bytes(8 * size))
        keys = np.frombuffer(stream, dtype="<u8")
        self._order = np.argsort(keys, kind="stable")  # cycle position -> roster index
        self._position = np.empty(size, dtype=np.int64)
        self._position[self._order] = np.arange(size)
        self._index = {name: i for i, name in enumerate(names)}

    def neighbours(self, name: str) -> list[str]:
        """``name``'s neighbours, sorted by name (the order of its sealed shares; a share's
        Shamir index is the holder's place in this list + 1)."""
        i = self._index[name]
        if self.complete:
            return [n for n in self.names if n != name]
        size, reach = len(self.names), self.degree // 2
        at = int(self._position[i])
        steps = np.concatenate([np.arange(1, reach + 1), -np.arange(1, reach + 1)])
        found = self._order[(at + steps) % size]
        return sorted(self.names[int(j)] for j in found)

    def share_index(self, owner: str, holder: str) -> int:
        """The Shamir index of ``holder``'s share of ``owner``'s seed."""
        return self.neighbours(owner).index(holder) + 1
