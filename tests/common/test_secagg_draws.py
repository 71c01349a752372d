"""Per-member draw counters signed by the consortium beacon (common.secagg.draws): what a
statement binds, how the beacon counts from its record, the gap a member accepts, and the
charge ``G`` times the per-graph bound."""

from __future__ import annotations

from decimal import Decimal

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from secagg_kit import DIGEST

from common.secagg.beacon import BEACON_ATTEMPTS, BeaconRecord
from common.secagg.draws import (
    BEACON_DRAWS,
    check_gap,
    draw_counts,
    draw_message,
    sign_draw,
    verify_draw,
)
from common.secagg.graph import graph_delta
from common.secagg.messages import RoundRef, RoundRefused
from common.secagg.params import AggregationParams

REF = RoundRef(study_id="s1", round=3, attempt=2)
KEY = Ed25519PrivateKey.generate()


def test_the_statement_is_domain_separated_and_lays_out_every_field():
    message = draw_message(REF, DIGEST, "h07", 5)
    assert message == (b"fedod-secagg/draws/1\x00s1\x00" + (3).to_bytes(8, "big")
                       + (2).to_bytes(2, "big") + bytes.fromhex(DIGEST) + b"h07\x00"
                       + (5).to_bytes(8, "big"))
    assert sign_draw(REF, DIGEST, "h07", 5, KEY) == sign_draw(REF, DIGEST, "h07", 5, KEY)


@pytest.mark.parametrize("other", [
    {"study_id": "s2"}, {"round": 4}, {"attempt": 1}, {"digest": "cd" * 32},
    {"member": "h08"}, {"count": 6}, {"key": True}])
def test_the_statement_binds_study_round_attempt_roster_member_and_count(other):
    signature = sign_draw(REF, DIGEST, "h07", 5, KEY)
    ref = REF.model_copy(update={k: v for k, v in other.items() if k in RoundRef.model_fields})
    key = Ed25519PrivateKey.generate() if "key" in other else KEY
    with pytest.raises(RoundRefused, match="does not verify under the consortium key"):
        verify_draw(ref, other.get("digest", DIGEST), other.get("member", "h07"),
                    other.get("count", 5), signature, key.public_key())
    verify_draw(REF, DIGEST, "h07", 5, signature, KEY.public_key())


def test_a_name_with_nul_or_a_count_out_of_range_gets_no_statement():
    for member, count in [("h\x0007", 1), ("h07", 0), ("h07", 2**63)]:
        with pytest.raises(RoundRefused):
            draw_message(REF, DIGEST, member, count)


def test_a_gap_above_g_is_refused_and_up_to_g_accepted():
    check_gap(BEACON_DRAWS, 0, REF, "h07")
    check_gap(10 + BEACON_DRAWS, 10, REF, "h07")
    with pytest.raises(RoundRefused, match=f"{BEACON_DRAWS + 1} since its last masked"):
        check_gap(11 + BEACON_DRAWS, 10, REF, "h07")


def test_a_draw_older_than_the_last_masked_is_refused_and_the_same_one_re_sent():
    check_gap(10, 10, REF, "h07")  # the draw it masked under: a re-sent frame
    with pytest.raises(RoundRefused, match="replayed roster"):
        check_gap(9, 10, REF, "h07")


def _rec(study, number, attempt, members):
    return BeaconRecord(study, number, attempt, f"{number:02x}{attempt:02x}" * 16, "sig",
                        tuple(members))


def test_counts_are_rosters_of_the_study_naming_the_member_across_rounds():
    records = [_rec("s1", 1, 1, ["a", "b"]), _rec("s2", 1, 1, ["a"]),
               _rec("s1", 2, 1, ["a", "c"]), _rec("s1", 3, 1, ["a", "b", "c"])]
    new = _rec("s1", 3, 2, ["a", "c"])
    assert draw_counts(records, new) == {"a": 4, "c": 3}  # a: in 3 signed rosters + this one
    assert draw_counts(records, records[3]) == {"a": 3, "b": 2, "c": 2}  # a retry: the same
    assert draw_counts(records, records[0]) == {"a": 1, "b": 1}


def test_g_covers_the_attempts_of_a_round():
    assert BEACON_ATTEMPTS <= BEACON_DRAWS == 8


def test_the_charge_is_g_times_the_bound_and_at_most_2_to_the_minus_40():
    """At the default D = T = 5% of n, every cohort whose graph needs the beacon is charged
    ``G`` times its per-graph bound (rounded up to 1e-18), and the degree keeps that at most
    ``2**-40`` (common.secagg.graph.graph_degree)."""
    for n in range(57, 1001, 7):
        d = t = max(1, n * 5 // 100)
        params = AggregationParams(mode="secure", cohort_size=n, max_dropouts=d,
                                   max_colluders=t)
        bound = graph_delta(n, d, t)
        if not params.needs_beacon:
            assert params.graph_delta == 0
            continue
        assert Decimal(float(BEACON_DRAWS * bound)) <= params.graph_delta
        assert params.graph_delta < Decimal(float(BEACON_DRAWS * bound)) + Decimal("1e-18")
        assert params.graph_delta <= Decimal(2) ** -40, n
    at_1000 = AggregationParams(mode="secure", cohort_size=1000, max_dropouts=50,
                                max_colluders=50)
    assert at_1000.needs_beacon and at_1000.graph_delta == Decimal("7.10574E-13")
    assert at_1000.graph_delta <= Decimal(2) ** -40
