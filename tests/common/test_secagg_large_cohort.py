"""A cohort beyond 255 members (Shamir indices past one byte) recovers a lost member's
self seed from the other members' shares."""

from __future__ import annotations

import numpy as np
import pytest
from secagg_kit import Cohort

from common.secagg import server as s
from common.secagg.params import AggregationParams
from common.secagg.shares import MAX_HOLDERS

pytestmark = pytest.mark.slow  # a 300-member round


def test_the_share_bound_is_the_config_bound():
    le = [m.le for m in AggregationParams.model_fields["cohort_size"].metadata
          if getattr(m, "le", None) is not None]
    assert le == [MAX_HOLDERS]
    AggregationParams(mode="secure", cohort_size=MAX_HOLDERS)


def test_a_300_member_round_recovers_the_last_members_seed_from_shares_past_index_255():
    cohort = Cohort.make(300, max_dropouts=149)  # complete graph, threshold T + D + 1 = 151
    assert (cohort.params.degree, cohort.params.threshold) == (299, 151)
    cohort.publish()
    roster = cohort.server_roster()
    lost = roster.names[-1]  # Shamir index 300
    assert roster.share_index(lost, roster.names[-2]) == 299
    cells = 7
    vector = np.arange(cells, dtype=np.int64) - 3
    words = cohort.accept({lost: cohort.mask(lost, vector)}, cells)
    others = [n for n in roster.names if n != lost]
    words.update({n: np.zeros(cells, dtype=np.uint64) for n in others})
    seeds = {n: cohort.members[n].secrets.self_seed for n in others}
    recover = s.build_recover(roster, [lost], cohort.coordinator)
    holders = others[-151:]  # indices 149..299: most past one byte
    for h in holders:
        cohort.members[h].unmasked = cohort.members[h].masked = 1  # masked and answered attempt 1
    assert min(roster.share_index(lost, h) for h in holders) == 149
    shares = {
        h: s.accept_shares(cohort.recover(h, recover), roster, name=h,
                           identity=cohort.members[h].identity.public_key(), missing=[lost])
        for h in holders
    }
    commitments = {lost: cohort.commitment(lost)}
    total = s.reveal_sum(roster, words, seeds, shares, commitments)  # the recovered seed
    assert total.shape == (cells,)  # matches its signed commitment, or reveal_sum refuses
    # the others' words are zeros here, so their pairwise masks do not cancel: check the
    # recovered seed directly instead of the sum
    assert s._seed_of(lost, roster, {}, shares, commitments) == (
        cohort.members[lost].secrets.self_seed)
