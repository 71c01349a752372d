"""The SecAgg+ masking graph: fixed by the roster digest, symmetric, of the stated degree, with
the degree and threshold the privacy argument needs; Shamir indices past 255."""

from __future__ import annotations

import base64
import hashlib
import itertools
import random
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from secagg_kit import DIGEST, Cohort

from common.secagg import participant as p
from common.secagg import server as s
from common.secagg.answers import answer_recover, answer_unmask
from common.secagg.draws import BEACON_DRAWS as G
from common.secagg.graph import (
    GRAPH_FAILURE,
    SPARSE_FACTOR,
    MaskingGraph,
    disconnect_bound,
    graph_degree,
    graph_delta,
    graph_failure,
    share_threshold,
    threshold_failure,
)
from common.secagg.messages import RoundRefused
from common.secagg.roster import from_bitmap
from common.secagg.shares import combine_seed, split_seed

NAMES = [f"m{i:04d}" for i in range(200)]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_neighbours_are_fixed_by_the_roster_digest_alone():
    a = MaskingGraph(NAMES, _digest("roster-1"), 8)
    again = MaskingGraph(list(NAMES), _digest("roster-1"), 8)
    other = MaskingGraph(NAMES, _digest("roster-2"), 8)
    assert all(a.neighbours(n) == again.neighbours(n) for n in NAMES)
    assert sum(a.neighbours(n) != other.neighbours(n) for n in NAMES) > 150


@pytest.mark.parametrize("size,degree", [(200, 8), (51, 14), (10, 2), (7, 6), (7, 30)])
def test_the_graph_is_symmetric_with_the_stated_degree(size, degree):
    g = MaskingGraph(NAMES[:size], _digest(f"{size}/{degree}"), degree)
    want = min(degree, size - 1)
    for name in NAMES[:size]:
        near = g.neighbours(name)
        assert len(near) == len(set(near)) == want and name not in near
        assert all(name in g.neighbours(v) for v in near)
        assert near == sorted(near)


def test_an_odd_sparse_degree_is_refused():
    with pytest.raises(ValueError, match="even degree"):
        MaskingGraph(NAMES, _digest("x"), 7)


def test_the_permutation_is_close_to_uniform():
    """Position of one member on the cycle over many roster digests: chi-square, 10 bins."""
    names = NAMES[:10]
    counts = np.zeros(10)
    for i in range(2000):
        g = MaskingGraph(names, _digest(f"r{i}"), 2)
        counts[int(g._position[0])] += 1
    chi2 = float(((counts - 200) ** 2 / 200).sum())
    assert chi2 < 27.9  # 9 degrees of freedom, p = 0.001


def _connected(g: MaskingGraph, honest: set[str]) -> bool:
    start = next(iter(honest))
    seen, todo = {start}, [start]
    while todo:
        for v in g.neighbours(todo.pop()):
            if v in honest and v not in seen:
                seen.add(v)
                todo.append(v)
    return seen == honest


def test_honest_members_stay_connected_when_colluders_are_fewer_than_the_degree():
    """T < k: two runs of k/2 colluders are impossible, so the bound is exactly 0 (checked on
    every placement of 5 colluders among 12 members on 20 graphs)."""
    names = NAMES[:12]
    assert disconnect_bound(12, 5, 6) == 0
    for i in range(20):
        g = MaskingGraph(names, _digest(f"c{i}"), 6)
        for bad in itertools.combinations(names, 5):
            assert _connected(g, set(names) - set(bad))


def test_the_disconnection_bound_holds_empirically():
    """k = 4, 6 colluders among 40: the measured disconnection rate stays under the bound."""
    bound = disconnect_bound(40, 6, 4)
    assert 0 < bound < 1
    rng = random.Random(7)
    names = NAMES[:40]
    trials, broken = 3000, 0
    for i in range(trials):
        bad = set(rng.sample(names, 6))
        broken += not _connected(MaskingGraph(names, _digest(f"d{i}"), 4), set(names) - bad)
    assert broken / trials <= float(bound)


@pytest.mark.parametrize("n,d,t", [(100, 5, 5), (1000, 50, 50), (1000, 50, 100),
                                   (1000, 50, 333), (10_000, 500, 500), (20, 2, 2)])
def test_the_degree_meets_the_bound_and_the_threshold_rules(n, d, t):
    k = graph_degree(n, d, t)
    th = share_threshold(n, d, t, k)
    if k == n - 1:
        assert th == min(t + d + 1, k) and th > t  # every colluder is a neighbour
        return
    assert k % 2 == 0 and SPARSE_FACTOR * k <= n - d - 1
    assert all(G * graph_failure(r, t, k, th) <= GRAPH_FAILURE for r in range(n - d, n + 1))
    base = min(t + d, k * (t + d) // (n - 2 * d - t)) + 1
    assert th == base or not all(G * graph_failure(r, t, k, th - 1) <= GRAPH_FAILURE
                                 for r in range(n - d, n + 1))  # the smallest that qualifies
    smaller = k - 2
    assert smaller < 2 or 4 * share_threshold(n, d, t, smaller) > 3 * smaller or any(
        G * graph_failure(r, t, smaller, share_threshold(n, d, t, smaller)) > GRAPH_FAILURE
        for r in range(n - d, n + 1))
    # two attempts: colluders and the <= D members of one roster only hold k (T + D) shares,
    # fewer than t for each of the n - 2D - T honest members in both rosters
    assert th * (n - 2 * d - t) > k * (t + d) or th > t + d
    assert 4 * th <= 3 * k


@pytest.mark.parametrize("roster,colluders,degree", [(100, 5, 8), (95, 5, 8), (1000, 50, 20),
                                                      (950, 50, 20), (60, 20, 10)])
def test_the_threshold_bound_is_r_times_the_hypergeometric_tail(roster, colluders, degree):
    """Colluders among one member's k neighbours drawn from the R - 1 others: hypergeometric
    (scipy's, as an independent reference); the bound is R times its tail at t."""
    from scipy.stats import hypergeom

    for t in range(1, degree + 1):
        tail = hypergeom(roster - 1, colluders, degree).sf(t - 1)
        got = float(threshold_failure(roster, colluders, degree, t))
        assert got == pytest.approx(min(1.0, roster * tail), rel=1e-9, abs=1e-300)
    assert threshold_failure(roster, colluders, degree, colluders + 1) == 0


def test_the_colluders_never_reach_the_threshold_in_drawn_graphs():
    """n = 100, D = T = 5: k = 8 and t = 6 > T, so in no drawn graph do the colluding
    neighbours of a member hold t shares of its seed; with the old t = 1 almost every graph
    put a member's seed within the colluders' reach."""
    assert (graph_degree(100, 5, 5), share_threshold(100, 5, 5, 8)) == (8, 6)
    rng = random.Random(3)
    names = NAMES[:100]
    reached_old = 0
    for i in range(200):
        bad = set(rng.sample(names, 5))
        graph = MaskingGraph(names, _digest(f"t{i}"), 8)
        most = max(len(bad & set(graph.neighbours(m))) for m in names if m not in bad)
        assert most < 6
        reached_old += most >= 1
    assert reached_old > 150


def test_the_defaults_of_a_thousand_members_are_sparse():
    """n = 1000 with 5 % dropouts and 5 % colluders: 20 neighbours instead of 999, and a
    threshold of 15 that 50 colluders reach for some member with probability below 2^-40."""
    assert graph_degree(1000, 50, 50) == 20 and share_threshold(1000, 50, 50, 20) == 15
    assert G * graph_failure(950, 50, 20, 15) <= Fraction(1, 2**40)
    assert G * graph_failure(950, 50, 20, 14) > Fraction(1, 2**40)


@pytest.mark.slow
def test_shamir_in_gf_2_128_takes_indices_past_255():
    seed = bytes(range(16))
    shares = split_seed(seed, 300, 1000)
    picked = {i + 1: shares[i] for i in range(700, 1000)}  # indices 701..1000
    assert combine_seed(picked, 300) == seed
    assert combine_seed({i + 1: shares[i] for i in range(299)} | {1000: shares[999]}, 300) == seed
    with pytest.raises(ValueError, match="299 distinct shares, 300 needed"):
        combine_seed({i + 1: shares[i] for i in range(299)}, 300)


def test_a_sparse_round_masks_and_recovers_with_neighbours_only():
    """40 members, k = 4 (T = 2, D = 4): masked frames carry 4 sealed shares, not 39; two
    members lost after masking are recovered from their neighbours' shares alone."""
    cohort = Cohort.make(40, max_dropouts=4, max_colluders=2)
    assert cohort.params.degree == 4
    rng = np.random.default_rng(1)
    vectors = {n: rng.integers(-50, 50, 6) for n in cohort.members}
    lost = ["h03", "h17"]
    total = cohort.run(vectors, responders=[n for n in cohort.members if n not in lost])
    assert np.array_equal(total, sum(vectors.values()))
    roster = cohort.server_roster()
    assert all(len(roster.holders(n)) == 4 for n in roster.names)
    answered = set(roster.names) - set(lost)
    helpers = s.helpers(roster, answered, lost)
    assert set(helpers) == {h for m in lost for h in roster.holders(m)} - set(lost)
    assert len(cohort.uploads["h00"]) < 6 * 4 + 11 + 64 + 32 * 5 + 64 + 8


def test_a_lost_member_with_too_few_answering_neighbours_is_unrecoverable():
    cohort = Cohort.make(40, max_dropouts=4, max_colluders=2)
    cohort.publish()
    roster = cohort.server_roster()
    victim = roster.names[0]
    gone = [victim, *roster.holders(victim)]
    answered = set(roster.names) - set(gone)
    assert victim in s.unrecoverable(roster, answered, gone)


def test_the_graph_failure_probability_is_charged_as_delta():
    """A sparse graph whose bound is above 0 adds G times it (G = BEACON_DRAWS draws including
    a member between two of its releases; rounded up to 1e-18) to the delta of every secure
    release; the complete
    graph, or colluders fewer than the degree, add 0."""
    from common.secagg.draws import BEACON_DRAWS
    from common.secagg.params import AggregationParams
    from common.study.config import FeatureSpec, PrivacyParams, new_study_config

    feats = [FeatureSpec(name=f"x{i}", lo=0.0, hi=1.0) for i in range(3)]
    for (n, d, t), delta in [((1000, 50, 50), "7.10574E-13"), ((100, 5, 5), "0"),
                             ((20, 2, 2), "0")]:
        params = AggregationParams(mode="secure", cohort_size=n, max_dropouts=d,
                                   max_colluders=t)
        config = new_study_config("s1", feats, privacy=PrivacyParams(epsilon_lsh="0.1"),
                                  n_tables=5, aggregation=params)
        cost = config.release_cost()
        assert cost.delta == params.graph_delta == Decimal(delta)
        bound = BEACON_DRAWS * graph_delta(n, d, t)
        assert Decimal(float(bound)) <= cost.delta < Decimal(float(bound)) + Decimal("1e-18")
    assert AggregationParams(mode="secure", cohort_size=100, max_dropouts=5,
                             max_colluders=5).needs_beacon  # sparse: a beacon, even at 0


def test_a_roster_without_the_neighbours_adverts_is_refused():
    cohort = Cohort.make(40, max_dropouts=4, max_colluders=2)
    cohort.publish()
    m = cohort.members["h00"]
    check = dict(me="h00", my_advert=m.advert, coordinator_key=cohort.coordinator.public_key(),
                 ref=cohort.ref, params=cohort.params, config_digest=DIGEST, modulus_bits=cohort.k,
                 identities=cohort.identities())
    served = cohort.served("h00", cohort.roster)
    assert p.check_roster(cohort.roster, adverts=served, **check).names == sorted(cohort.members)
    for short in ("", base64.b85encode(base64.b85decode(served)[:-96]).decode(), "not b85 ~~"):
        with pytest.raises(RoundRefused, match="did not serve the adverts"):
            p.check_roster(cohort.roster, adverts=short, **check)


def test_a_bitmap_of_another_length_or_size_is_refused():
    cohort = Cohort.make(9, max_dropouts=2)
    cohort.publish()
    body = cohort.server_roster().body
    names = sorted(cohort.members)
    assert from_bitmap(names, body) == names
    with pytest.raises(RoundRefused, match="need"):
        from_bitmap(names[:8], body)  # the certificate has 8 members: one byte, not two
    with pytest.raises(RoundRefused, match="its size says"):
        from_bitmap(names, body.model_copy(update={"size": 8}))


def test_a_member_helps_only_the_last_attempt_it_masked():
    """It masked attempt 2 after attempt 1: an unmask or recover request of attempt 1 is
    refused, so no earlier attempt is revealed with its help."""
    cohort = Cohort.make(4, max_dropouts=1)
    cohort.publish()
    accepted = cohort.accept({n: cohort.mask(n, np.ones(2)) for n in cohort.members}, 2)
    request = cohort.request(accepted)
    cohort.members["h00"].masked = 2  # as if it masked attempt 2 meanwhile
    with pytest.raises(RoundRefused, match="last masked attempt 2"):
        cohort.answer("h00", request)
    assert cohort.members["h00"].unmasked is None
    cohort.members["h00"].masked = 1
    cohort.answer("h00", request)
    cohort.members["h00"].masked = 2
    recover = s.build_recover(cohort.server_roster(), ["h03"], cohort.coordinator)
    with pytest.raises(RoundRefused, match="did not answer the unmask request of attempt 1"):
        cohort.recover("h00", recover)


def test_a_share_sealed_under_one_roster_does_not_open_under_another():
    from common.secagg.keys import share_aad
    from common.secagg.shares import ShareOpenError, open_share, seal_share

    key = bytes(range(64))
    sealed = seal_share(key, bytes(16), share_aad("s/1/1", "h00", "h01", "ab" * 32))
    assert open_share(key, sealed, share_aad("s/1/1", "h00", "h01", "ab" * 32)) == bytes(16)
    with pytest.raises(ShareOpenError):
        open_share(key, sealed, share_aad("s/1/1", "h00", "h01", "cd" * 32))


def test_a_roster_switched_after_masking_changes_no_neighbours_the_member_refuses():
    """A coordinator that serves another roster of the same attempt once a member masked
    (other members in it, so other graph neighbours) gets neither its seed nor its shares."""
    cohort = Cohort.make(40, max_dropouts=4, max_colluders=2)
    first = cohort.publish()
    frames = {n: cohort.mask(n, np.zeros(8, dtype=np.int64)) for n in cohort.members}
    cohort.accept(frames, 8)
    me = "h00"
    masked_under = cohort.members[me].roster.digest
    others = [n for n in sorted(cohort.members) if n not in cohort.members[me].roster.holders(me)]
    before = cohort.members[me].roster.holders(me)
    second = cohort.publish([me, *others[:36]])  # same attempt, another roster
    switched = cohort.check(me, second)
    assert first.digest() == masked_under != switched.digest
    assert set(switched.holders(me)).isdisjoint(before)  # none of the neighbours it masked with
    request = s.build_request(cohort.server_roster(), len(switched.names), cohort.coordinator)
    m = cohort.members[me]
    with pytest.raises(RoundRefused, match="another roster than the one this member masked"):
        answer_unmask(request, switched, me=me, identity=m.identity, secrets=m.secrets,
                      acks="", coordinator_key=cohort.coordinator.public_key(),
                      params=cohort.params, unmasked_attempt=None, masked_attempt=1,
                      record=lambda a: None, masked_roster=masked_under)
    recover = s.build_recover(cohort.server_roster(), [others[0]], cohort.coordinator)
    with pytest.raises(RoundRefused, match="another roster than the one this member masked"):
        answer_recover(recover, switched, me=me, identity=m.identity, secrets=m.secrets,
                       inbox={}, coordinator_key=cohort.coordinator.public_key(),
                       unmasked_attempt=1, masked_attempt=1, masked_roster=masked_under)


def test_the_recovery_bound_covers_random_dropouts_after_masking():
    """n = 100, D = 5 lost at random after masking: the share of drawn graphs in which some
    lost member keeps fewer than t = 6 of its 8 neighbours stays within the stated bound."""
    from common.secagg.graph import recovery_failure

    bound = float(recovery_failure(100, 5, 5))
    rng = random.Random(5)
    names = NAMES[:100]
    trials, stuck = 3000, 0
    for i in range(trials):
        graph = MaskingGraph(names, _digest(f"r{i}"), 8)
        lost = set(rng.sample(names, 5))
        stuck += any(len(set(graph.neighbours(m)) - lost) < 6 for m in lost)
    assert 0 < stuck / trials <= bound + 3 * (bound / trials) ** 0.5
