"""An active coordinator colluding with a member against honest members of a secure round.

The coordinator plays every trick of the audit at once, against the real participant code
(``participant.secagg.checks.check_certified_roster``, ``common.secagg.participant.mask_upload``,
``common.secagg.answers.answer_unmask``): it shows each victim its own roster of the same
attempt (a split view), grinds each view's graph (the roster's free advert digest) until the
victim's only neighbours are the other victims and the colluder, takes the colluder's sealed
shares of the victims' seeds and asks the victims to unmask. It wants the sum of the four
victims' noisy vectors (h_min = 9 honest shares are promised).

The layers, each checked on its own so that the test fails if any is switched off:

4. every sparse graph needs the consortium's beacon: the victims refuse before masking;
1. with a beacon that signs every view anyway (a key holder that lost its record), the masks
   are bound to each victim's roster digest and do not cancel between views;
2. no victim answers the unmask request: its neighbours acknowledged other rosters;
3. the colluder's shares stay below the Shamir threshold (t = 2 > T = 1).

The last test switches the layers off one by one (monkeypatch) and shows that the attack then
works: the harness is a real attack, not a test that cannot fail.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

from common.secagg import answers, graph
from common.secagg import participant as p
from common.secagg.beacon import sign_beacon
from common.secagg.draws import sign_draw
from common.secagg.graph import MaskingGraph, share_threshold
from common.secagg.keys import ack_key, share_aad, share_key
from common.secagg.masks import (
    from_words,
    keystream_words,
    pair_seed,
    self_mask_key,
    unpack_words,
)
from common.secagg.membership import MembershipBody, sign_membership
from common.secagg.messages import (
    RequestBody,
    RosterBody,
    RoundRef,
    RoundRefused,
    b64d,
    b64e,
    sign_message,
)
from common.secagg.params import AggregationParams
from common.secagg.roster import pack_for, to_bitmap
from common.secagg.schemas import BeaconDraw, RoundState
from common.secagg.shares import combine_seed, open_share
from common.secagg.wire import (
    ACK_TAG_BYTES,
    COMMITMENT_BYTES,
    HEADER_BYTES,
    SEALED_SHARE_BYTES,
    ack_tag,
)
from common.study.config import FeatureSpec, PrivacyParams, new_study_config
from participant.secagg.checks import check_certified_roster

N, K_BITS, CELLS = 10, 32, 24
VICTIMS = ["h00", "h01", "h02", "h03"]
COLLUDER = "h04"
REF = RoundRef(study_id="s1", round=1, attempt=1)
DIGEST = "ab" * 32


def _clear_caches() -> None:
    for f in (graph.graph_degree, graph.share_threshold, graph.graph_delta):
        f.cache_clear()


@pytest.fixture
def sparse_ten(monkeypatch):
    """n = 10, D = 0, T = 1 with a sparse graph (k = 4, t = 2): sparse graphs start at 34
    members (``SPARSE_FACTOR``, a cost knob, not a security one), where grinding a view is
    too slow for a unit test; at 10 members a victim's wanted neighbourhood is one graph in
    126."""
    _clear_caches()
    monkeypatch.setattr(graph, "SPARSE_FACTOR", 2)
    params = AggregationParams(mode="secure", cohort_size=N, max_dropouts=0, max_colluders=1)
    assert (params.degree, params.threshold, params.needs_beacon) == (4, 2, True)
    yield params
    _clear_caches()


@dataclass
class Member:
    name: str
    identity: Ed25519PrivateKey = field(default_factory=Ed25519PrivateKey.generate)
    secrets: p.RoundSecrets = field(default_factory=p.RoundSecrets.generate)
    noisy: np.ndarray = field(default_factory=lambda: np.random.default_rng().integers(
        -40, 400, CELLS))

    @property
    def advert(self) -> bytes:
        return p.make_advert(REF, self.name, self.identity, self.secrets)


@dataclass
class Outcome:
    refused: dict[str, str] = field(default_factory=dict)  # victim -> why, before masking
    masks_cancel: bool = False  # with every victim's seed known, the victims' sum comes out
    answered: set[str] = field(default_factory=set)  # victims that sent their seed
    colluder_seeds: set[str] = field(default_factory=set)  # seeds rebuilt from its shares
    recovered: bool = False  # the attacker holds the victims' exact sum


class Coordinator:
    """The malicious coordinator with its colluder, over a certified cohort of ten."""

    def __init__(self, params: AggregationParams, beacon_signs_anything: bool) -> None:
        self.params, self.key = params, Ed25519PrivateKey.generate()
        self.consortium = Ed25519PrivateKey.generate()
        self.beacon_signs_anything = beacon_signs_anything
        self.members = {f"h{i:02d}": Member(f"h{i:02d}") for i in range(N)}
        self.identities = {n: b64e(p.raw_public(m.identity)) for n, m in self.members.items()}
        body = MembershipBody(study_id="s1", version=1, cohort_size=N, max_dropouts=0,
                              max_colluders=1, members=self.identities,
                              expires_at=datetime.now(UTC) + timedelta(days=1))
        self.membership = sign_membership(body, self.consortium)
        self.config = new_study_config("s1", [FeatureSpec(name="x", lo=0.0, hi=1.0)],
                                       n_tables=2, privacy=PrivacyParams(epsilon_lsh="1"),
                                       aggregation=params)

    def ground_view(self, victim: str) -> tuple:
        """A roster of everyone whose graph gives ``victim`` the other victims and the
        colluder as its only neighbours (ground over the advert digest, a free field)."""
        names, want = sorted(self.members), sorted({*VICTIMS, COLLUDER} - {victim})
        for _ in range(20_000):
            body = RosterBody(**REF.model_dump(), config_digest=DIGEST, modulus_bits=K_BITS,
                              degree=self.params.degree, threshold=self.params.threshold,
                              size=N, members=to_bitmap(names, names),
                              adverts_digest=os.urandom(32).hex())
            roster = sign_message("roster", body, self.key)
            beacon = (sign_beacon(REF, roster.digest(), self.consortium)
                      if self.beacon_signs_anything else None)
            seeded = b64d(beacon) if beacon and self.params.needs_beacon else None
            g = MaskingGraph(names, roster.digest(), body.degree, seeded)
            if g.neighbours(victim) == want:
                return roster, beacon
        raise AssertionError("no view found")

    def serve(self, victim: str, roster, beacon) -> RoundState:
        draw = BeaconDraw(count=1, signature=sign_draw(REF, roster.digest(), victim, 1,
                                                       self.consortium))
        held = p.VerifiedRoster(RosterBody.model_validate_json(roster.payload), roster.digest(),
                                sorted(self.members), {}, b64d(beacon) if beacon else None)
        if not self.params.needs_beacon:
            held = p.VerifiedRoster(held.body, held.digest, held.names, {})
        adverts = pack_for(held, victim, {n: m.advert for n, m in self.members.items()},
                           HEADER_BYTES)
        return RoundState(round=1, attempt=1, status="masking", roster=roster,
                          membership=self.membership, adverts=adverts, beacon=beacon,
                          draw=draw if beacon else None)

    def check(self, victim: str, st: RoundState) -> p.VerifiedRoster:
        m = self.members[victim]
        return check_certified_roster(
            st, m.advert, REF, me=victim, config=self.config,
            consortium_key=b64e(p.raw_public(self.consortium)),
            coordinator_key=self.key.public_key(), params=self.params, config_digest=DIGEST,
            modulus_bits=K_BITS, last_draw=0)


def _edge(c: Member, v: Member, digest: str) -> np.ndarray:
    """The mask on the victim-colluder edge, as the colluder computes it (signed as the
    victim added it, with the participant code's own derivation)."""
    seed = p.pair_seed(c.secrets.round_key, X25519PublicKey.from_public_bytes(
        p.raw_public(v.secrets.round_key)), round_id=REF.round_id, roster_digest=digest,
        purpose=b"mask", my_identity=p.raw_public(c.identity),
        peer_identity=p.raw_public(v.identity))
    sign = 1 if v.name < c.name else -1
    return sign * keystream_words(seed, CELLS, K_BITS).astype(np.int64)


def _unmasked(words: np.ndarray, seed: bytes, edge: np.ndarray) -> np.ndarray:
    mask = keystream_words(self_mask_key(seed), CELLS, K_BITS).astype(np.int64)
    return (words.astype(np.int64) - mask - edge) & ((1 << K_BITS) - 1)


def _tag_to(v: str, sender: str, frames: dict[str, bytes], views: dict, size: int) -> bytes:
    """The acknowledgement ``sender``'s masked frame (made under its own view) addresses to
    ``v``: what an honest coordinator would serve."""
    at = (HEADER_BYTES + size + COMMITMENT_BYTES + SEALED_SHARE_BYTES * views[sender].graph.degree
          + ACK_TAG_BYTES * views[sender].holders(sender).index(v))
    return frames[sender][at:at + ACK_TAG_BYTES]


def attack(params: AggregationParams, beacon_signs_anything: bool) -> Outcome:
    coord, out = Coordinator(params, beacon_signs_anything), Outcome()
    views, frames = {}, {}
    for v in VICTIMS:
        roster, beacon = coord.ground_view(v)
        try:
            views[v] = coord.check(v, coord.serve(v, roster, beacon))
        except RoundRefused as exc:
            out.refused[v] = exc.message
    if out.refused:
        return out
    c = coord.members[COLLUDER]
    for v in VICTIMS:
        m = coord.members[v]
        frames[v] = p.mask_upload(views[v], me=v, identity=m.identity, secrets=m.secrets,
                                  noisy=m.noisy)
    size = -(-CELLS * K_BITS // 8)
    words = {v: unpack_words(f[HEADER_BYTES:HEADER_BYTES + size], CELLS, K_BITS)
             for v, f in frames.items()}
    edges = {v: _edge(c, coord.members[v], views[v].digest) for v in VICTIMS}
    truth = sum(coord.members[v].noisy for v in VICTIMS)

    def total(seeds: dict[str, bytes]) -> np.ndarray:
        summed = sum(_unmasked(words[v], seeds[v], edges[v]) for v in VICTIMS)
        return from_words(np.asarray(summed, dtype=np.int64).view(np.uint64), K_BITS)

    oracle = {v: coord.members[v].secrets.self_seed for v in VICTIMS}
    out.masks_cancel = bool(np.array_equal(total(oracle), truth))
    seeds: dict[str, bytes] = {}
    for v in VICTIMS:  # 3: the colluder opens the share each victim sealed for it
        holders = views[v].holders(v)
        at = (HEADER_BYTES + size + COMMITMENT_BYTES
              + SEALED_SHARE_BYTES * holders.index(COLLUDER))
        key = share_key(c.secrets.round_key, views[v].members[v],
                        views[v].members[COLLUDER], REF.round_id, views[v].digest)
        share = open_share(key, frames[v][at:at + SEALED_SHARE_BYTES],
                           share_aad(REF.round_id, v, COLLUDER, views[v].digest))
        try:
            seeds[v] = combine_seed({holders.index(COLLUDER) + 1: share},
                                    views[v].body.threshold)
            out.colluder_seeds.add(v)
        except ValueError:
            pass
    for v in VICTIMS:  # 2: the victims are asked to unmask, with their neighbours' acks
        m, view = coord.members[v], views[v]
        acks = {n: _tag_to(v, n, frames, views, size) for n in view.holders(v) if n in views}
        key = ack_key(c.secrets.round_key, view.members[v], view.members[COLLUDER],
                      REF.round_id, view.digest)  # the colluder acknowledges v's own view
        acks[COLLUDER] = ack_tag(key, view.body, COLLUDER, v, view.digest)
        request = sign_message("request", RequestBody(**REF.model_dump(),
                               roster_digest=view.digest, included=N), coord.key)
        try:
            frame = answers.answer_unmask(
                request, view, me=v, identity=m.identity, secrets=m.secrets,
                acks=pack_for(view, v, acks), coordinator_key=coord.key.public_key(),
                params=params, unmasked_attempt=None, masked_attempt=1,
                record=lambda attempt: None, masked_roster=view.digest)
            seeds[v] = frame[HEADER_BYTES:HEADER_BYTES + 16]
            out.answered.add(v)
        except RoundRefused:
            pass
    out.recovered = set(seeds) == set(VICTIMS) and bool(np.array_equal(total(seeds), truth))
    return out


def test_victims_of_a_ground_split_view_refuse_before_masking_without_the_beacon(sparse_ten):
    out = attack(sparse_ten, beacon_signs_anything=False)
    assert set(out.refused) == set(VICTIMS)
    assert all("beacon" in why for why in out.refused.values())
    assert not out.recovered


def test_a_beacon_that_signs_every_view_still_yields_noise_not_a_sum(sparse_ten):
    """Even if the beacon signed each ground view (a key holder that lost its record), the
    victims' masks are bound to their own rosters, no victim unmasks, and the colluder's one
    share of each seed is below t = 2."""
    out = attack(sparse_ten, beacon_signs_anything=True)
    assert not out.refused
    assert not out.masks_cancel  # 1: the split views' masks do not cancel
    assert out.answered == set()  # 2: every victim saw acknowledgements of other rosters
    assert out.colluder_seeds == set()  # 3: t = 2 > one colluder share
    assert not out.recovered


def _unbound_pair_seed(*args, roster_digest, **kwargs):
    return pair_seed(*args, roster_digest="00" * 32, **kwargs)


@pytest.mark.parametrize("off", [{"bind"}, {"acks"}, {"threshold"}, {"bind", "threshold"},
                                  {"bind", "acks"}])
def test_with_a_layer_switched_off_the_attack_gets_through_it(sparse_ten, monkeypatch, off):
    """What each layer stops, seen by switching it off: the harness is a real attack. With
    the binding and either of the seed layers off, the victims' exact sum comes out."""
    if "bind" in off:
        monkeypatch.setattr(p, "pair_seed", _unbound_pair_seed)
    if "acks" in off:
        monkeypatch.setattr(answers, "check_ack_tag", lambda *a: True)
    if "threshold" in off:  # the rule before SecAgg+'s analysis: t = 1 here
        monkeypatch.setattr(AggregationParams, "threshold", property(
            lambda self: graph._base_threshold(N, 0, 1, self.degree)))
    params = AggregationParams(mode="secure", cohort_size=N, max_dropouts=0, max_colluders=1)
    out = attack(params, beacon_signs_anything=True)
    assert out.masks_cancel == ("bind" in off)
    assert (out.answered == set(VICTIMS)) == ("acks" in off)
    assert (out.colluder_seeds == set(VICTIMS)) == ("threshold" in off)
    assert out.recovered == ("bind" in off and len(off) == 2)
    assert share_threshold(N, 0, 1, 4) == 2  # the code's own rule is untouched


def test_without_the_beacon_rule_the_ground_views_are_masked(sparse_ten, monkeypatch):
    """Layer 4 switched off (the rule before: a beacon only where the graph's bound is not
    0): the victims accept their ground views and mask."""
    monkeypatch.setattr(AggregationParams, "needs_beacon", property(lambda self: False))
    params = AggregationParams(mode="secure", cohort_size=N, max_dropouts=0, max_colluders=1)
    out = attack(params, beacon_signs_anything=False)
    assert not out.refused and not out.masks_cancel and not out.recovered
