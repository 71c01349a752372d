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
it likes, or show members of one attempt different graphs; every bound below is per drawn
graph. So in every sparse graph the seed also takes the consortium key's signature over the
roster digest (:mod:`common.secagg.beacon`), which the coordinator cannot predict and gets at
most ``A`` of per round (docs/TRUST.md).

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

which is exactly 0 when ``T < k``. A member whose neighbours are all colluders is a special
case (the honest graph is then disconnected).

**Share threshold** (:func:`share_threshold`). At least
``min(T + D, floor(k (T + D) / (n - 2D - T))) + 1``, which keeps two attempts of a round from
both being revealed, and large enough that the colluders among a member's ``k`` neighbours
(hypergeometric: ``k`` drawn from the ``R - 1`` others, ``T`` of them colluders) reach ``t``
shares of no member's seed except with probability ``R * P(X >= t)``
(:func:`threshold_failure`; SecAgg+'s condition that the server and the corrupt neighbours
cannot rebuild a seed).

``k`` is the smallest even degree whose threshold is at most ``3k / 4`` and for which ``G``
times both bounds together (:func:`graph_failure`; ``G`` =
:data:`~common.secagg.draws.BEACON_DRAWS`: a release masks under one of at most ``G`` beacon
draws, and is charged for all of them) is at most :data:`GRAPH_FAILURE` (``2**-40``) for every
roster size ``R`` in ``[n - D, n]``.
"""

from __future__ import annotations

import functools
import hashlib
from fractions import Fraction
from math import comb

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from common.secagg.beacon import beacon_seed
from common.secagg.draws import BEACON_DRAWS

__all__ = [
    "GRAPH_FAILURE",
    "SPARSE_FACTOR",
    "graph_degree",
    "share_threshold",
    "disconnect_bound",
    "threshold_failure",
    "graph_failure",
    "recovery_failure",
    "MaskingGraph",
    "graph_seed",
    "graph_delta",
]

SPARSE_FACTOR = 8
"""A graph is sparse only where it cuts each member's neighbours to an eighth or fewer (from
34 members at D = T = 5 %, 70 with five colluders); smaller cohorts use the complete graph
(no beacon)."""

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


def threshold_failure(roster: int, colluders: int, degree: int, threshold: int) -> Fraction:
    """``R * P(X >= t)``, X hypergeometric (``k`` neighbours drawn from the ``R - 1`` other
    members, ``T`` of them colluders): a bound on the probability that the colluders hold
    ``t`` shares of some member's self seed (1 when it says nothing; exactly 0 when
    ``t > min(T, k)``). In a complete graph every colluder is a neighbour: 0 or 1."""
    others = roster - 1
    bad, k = min(colluders, others), min(degree, others)
    if threshold > min(bad, k):
        return Fraction(0)
    if k == others:
        return Fraction(1)
    tail = sum(comb(bad, x) * comb(others - bad, k - x)
               for x in range(threshold, min(bad, k) + 1))
    return min(Fraction(roster * tail, comb(others, k)), Fraction(1))


def graph_failure(roster: int, colluders: int, degree: int, threshold: int) -> Fraction:
    """Per drawn graph: the honest members disconnected, or some member's seed within the
    colluders' reach (:func:`disconnect_bound` + :func:`threshold_failure`, at most 1)."""
    return min(disconnect_bound(roster, colluders, degree)
               + threshold_failure(roster, colluders, degree, threshold), Fraction(1))


def _base_threshold(n: int, dropouts: int, colluders: int, degree: int) -> int:
    """``min(T + D, floor(k (T + D) / (n - 2D - T))) + 1``: two attempts of a round are
    never both revealed (docs/SECURE_AGGREGATION.md)."""
    spare = n - 2 * dropouts - colluders
    helpers = colluders + dropouts
    return (helpers if spare < 1 else min(helpers, degree * helpers // spare)) + 1


def _rosters(n: int, dropouts: int) -> range:
    return range(max(n - dropouts, 2), n + 1)


def _within_budget(n: int, dropouts: int, colluders: int, degree: int, threshold: int) -> bool:
    return all(BEACON_DRAWS * graph_failure(r, colluders, degree, threshold) <= GRAPH_FAILURE
               for r in _rosters(n, dropouts))


@functools.cache
def graph_degree(n: int, dropouts: int, colluders: int) -> int:
    """The public degree ``k`` of a study's masking graph from its signed ``(n, D, T)``: the
    smallest even ``k`` whose share threshold (:func:`share_threshold`) is at most ``3k / 4``
    (a lost member's seed is recovered while at least ``t`` of its ``k`` neighbours answer)
    and for which ``G`` times :func:`graph_failure` is at most :data:`GRAPH_FAILURE` for
    every roster size; ``n - 1`` (complete) when none of at most an eighth of the smallest
    roster's other members qualifies (:data:`SPARSE_FACTOR`: below that a sparse graph saves
    little, and every sparse graph needs the consortium's beacon)."""
    k = 2
    while SPARSE_FACTOR * k <= min(_rosters(n, dropouts)) - 1:
        t = share_threshold(n, dropouts, colluders, k)
        if 4 * t <= 3 * k and _within_budget(n, dropouts, colluders, k, t):
            return k
        k += 2
    return n - 1


@functools.cache
def share_threshold(n: int, dropouts: int, colluders: int, degree: int) -> int:
    """The Shamir threshold ``t`` of a self seed among its owner's ``k`` neighbours.

    At least ``min(T + D, floor(k (T + D) / (n - 2D - T))) + 1`` (two attempts of a round are
    never both revealed), and in a sparse graph the smallest such ``t`` for which the
    colluders, placed by the random cycle order, hold ``t`` shares of no member's seed except
    with probability :func:`threshold_failure` (SecAgg+, Bell et al. 2020: the coordinator
    plus the colluding neighbours must not reach ``t``), charged with the disconnection bound
    within :data:`GRAPH_FAILURE`. In the complete graph every colluder is a neighbour and the
    first rule already gives ``t >= T + D + 1``. At most ``degree`` (``degree`` when no
    threshold meets the budget: :func:`graph_degree` then takes a larger degree)."""
    base = min(_base_threshold(n, dropouts, colluders, degree), degree)
    if degree >= min(_rosters(n, dropouts)) - 1:
        return base
    for t in range(base, degree + 1):
        if _within_budget(n, dropouts, colluders, degree, t):
            return t
    return degree


def recovery_failure(n: int, dropouts: int, colluders: int) -> Fraction:
    """Liveness, not privacy: with ``D`` members of a full roster lost after masking, chosen
    at random, a bound on the probability that some lost member has fewer than ``t``
    surviving neighbours (its seed cannot be rebuilt and the round is abandoned):
    ``D * P(X > k - t)``, X the other lost members among its ``k`` neighbours
    (hypergeometric). 0 for the complete graph when ``n - D >= t``."""
    k = graph_degree(n, dropouts, colluders)
    t = share_threshold(n, dropouts, colluders, k)
    others, lost = n - 1, max(dropouts - 1, 0)
    if k >= others:
        return Fraction(0) if others - lost >= t else Fraction(1)
    tail = sum(comb(lost, x) * comb(others - lost, k - x)
               for x in range(k - t + 1, min(lost, k) + 1))
    return min(Fraction(dropouts * tail, comb(others, k)), Fraction(1))


@functools.cache
def graph_delta(n: int, dropouts: int, colluders: int) -> Fraction:
    """The largest :func:`graph_failure` over the roster sizes ``[n - D, n]`` at the study's
    degree and threshold: the probability, per drawn graph, that some honest member's vector
    (or the sum of a part of the honest members) is exposed or some member's seed is within
    the colluders' reach; charged as delta (``G`` times) with every secure release."""
    k = graph_degree(n, dropouts, colluders)
    t = share_threshold(n, dropouts, colluders, k)
    return max(graph_failure(r, colluders, k, t) for r in _rosters(n, dropouts))


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
