"""Secure aggregation protocol (common.secagg): masks cancel, masked words look uniform,
dropouts recover or abort (replayed, reordered or forged messages: test_secagg_refusals.py)."""

from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from secagg_kit import Cohort

from common.errors import PayloadInvalid, SignatureInvalid
from common.secagg import server as s
from common.secagg.masks import (
    apply_masks,
    from_words,
    keystream_words,
    pack_words,
    self_mask_key,
    to_words,
    unpack_words,
)
from common.secagg.messages import RoundRefused
from common.secagg.shares import (
    ShareOpenError,
    combine_seed,
    open_share,
    seal_share,
    split_seed,
)

K = st.sampled_from([17, 19, 32, 63, 64])  # values below span 16 bits + sign


@settings(max_examples=25, deadline=None)
@given(n=st.integers(3, 6), cells=st.integers(1, 40), k=K, data=st.data())
def test_masks_cancel_exactly_in_a_full_round(n, cells, k, data):
    lim = 2 ** (k - 1) // (4 * n)
    vals = st.lists(st.integers(-lim, lim), min_size=cells, max_size=cells)
    vectors = {f"h{i:02d}": np.array(data.draw(vals), dtype=np.int64) for i in range(n)}
    total = Cohort.make(n, k=k).run(vectors)
    np.testing.assert_array_equal(total, sum(vectors.values()))


@settings(max_examples=50, deadline=None)
@given(
    seeds=st.lists(st.tuples(st.sampled_from([1, -1]), st.binary(min_size=32, max_size=32))),
    values=st.lists(st.integers(-(2**15), 2**15 - 1), min_size=1, max_size=30),
    k=K,
)
def test_pairwise_masks_with_opposite_signs_cancel(seeds, values, k):
    x = to_words(np.array(values, dtype=np.int64), k)
    b = bytes(16)
    up = apply_masks(x, b, seeds, k)
    down = apply_masks(np.zeros_like(x), b, [(-sign, seed) for sign, seed in seeds], k)
    mask = np.uint64((1 << k) - 1)
    unmasked = (up + down - 2 * keystream_words(self_mask_key(b), len(values), k)) & mask
    np.testing.assert_array_equal(from_words(unmasked, k), values)


@pytest.mark.parametrize("k", [2, 8, 17, 24, 63, 64])
def test_words_pack_to_exactly_k_bits_and_sign_round_trip(k):
    v = np.array([0, 1, -1, 2 ** (k - 1) - 1, -(2 ** (k - 1))], dtype=np.int64)
    w = to_words(v, k)
    packed = pack_words(w, k)
    assert len(packed) == -(-5 * k // 8)
    np.testing.assert_array_equal(from_words(unpack_words(packed, 5, k), k), v)
    with pytest.raises(ValueError, match="expected"):
        unpack_words(packed[:-1], 5, k)
    if 5 * k % 8:  # one encoding per vector: a set padding bit is refused
        with pytest.raises(ValueError, match="padding"):
            unpack_words(packed[:-1] + bytes([packed[-1] | 0x80]), 5, k)


@pytest.mark.parametrize("k", [16, 19])
def test_masked_words_the_coordinator_holds_are_uniform(k):
    """Whatever the vector (all zeros or a huge constant), the upload's words (packed to k
    bits, unpacked as the coordinator does) are uniform mod 2**k: chi-square over 256 bins of
    the top and the bottom 8 bits, and the two uploads' distributions cannot be told apart
    (two-sample test). Thresholds 1e-6: a false alarm is negligible."""
    cohort = Cohort.make(3, k=k)
    cohort.publish()
    cells = 60_000
    zeros = np.zeros(cells, dtype=np.int64)
    big = np.full(cells, 30_000, dtype=np.int64)
    accepted = cohort.accept(
        {"h00": cohort.mask("h00", zeros), "h01": cohort.mask("h01", big)}, cells
    )
    a, b = (accepted[n] for n in ("h00", "h01"))
    top = np.uint64(k - 8)
    for words in (a, b):
        counts = np.bincount((words >> top).astype(np.int64), minlength=256)
        assert counts.size == 256 and stats.chisquare(counts).pvalue > 1e-6
        low = np.bincount((words & np.uint64(255)).astype(np.int64), minlength=256)
        assert stats.chisquare(low).pvalue > 1e-6
    table = np.vstack([np.bincount((w >> top).astype(np.int64), minlength=256)
                       for w in (a, b)])
    assert stats.chi2_contingency(table).pvalue > 1e-6
    # the statistic has power: the unmasked vectors are told apart at once
    assert stats.chisquare(np.bincount(to_words(zeros, k) >> top, minlength=256)
                           + 1).pvalue < 1e-6


@pytest.mark.parametrize("threshold,holders", [(1, 3), (2, 3), (3, 5), (12, 20), (2, 1000)])
def test_seed_shares_recover_with_threshold_and_not_below(threshold, holders):
    seed = bytes(range(16))
    shares = dict(enumerate(split_seed(seed, threshold, holders), start=1))
    last = dict(list(shares.items())[-threshold:])  # indices up to holders (> 255 too)
    assert combine_seed(last, threshold) == seed
    with pytest.raises(ValueError, match="needed"):
        combine_seed(dict(list(shares.items())[: threshold - 1]), threshold)


def test_seed_shares_stop_at_the_config_bound():
    with pytest.raises(ValueError, match="<= 1000"):
        split_seed(bytes(16), 2, 1001)


def test_sealed_shares_are_32_bytes_deterministic_and_bound_to_round_and_holder():
    key, share = bytes(range(64)), bytes(range(16))  # the index byte is implicit
    aad = b"fedod-secagg/share/1\x00s1/1/1\x00h00\x00h01"
    sealed = seal_share(key, share, aad)
    assert len(sealed) == 32 and seal_share(key, share, aad) == sealed  # a resend repeats it
    assert open_share(key, sealed, aad) == share
    flipped = bytes([sealed[0] ^ 1]) + sealed[1:]
    for bad_key, bad, bad_aad in ((key, flipped, aad), (bytes(64), sealed, aad),
                                  (key, sealed, aad.replace(b"h01", b"h02")),
                                  (key, sealed, aad.replace(b"s1/1/1", b"s1/1/2"))):
        with pytest.raises(ShareOpenError, match="does not authenticate"):
            open_share(bad_key, bad, bad_aad)


def test_a_misrouted_or_altered_share_is_refused_in_the_recover_phase():
    cohort = Cohort.make(4, max_dropouts=1)
    cohort.publish()
    accepted = cohort.accept({n: cohort.mask(n, np.ones(2)) for n in cohort.members}, 2)
    cohort.answer("h00", cohort.request(accepted))
    recover = s.build_recover(cohort.server_roster(), ["h01", "h02"], cohort.coordinator)
    right = cohort.inbox("h00")
    misrouted = {**right, "h01": cohort.inbox("h03")["h01"]}  # meant for h03
    swapped = {**right, "h01": right["h02"], "h02": right["h01"]}
    for inbox in (misrouted, swapped):
        with pytest.raises(RoundRefused, match="does not authenticate for h00"):
            cohort.recover("h00", recover, inbox)
    answer = cohort.recover("h00", recover, right)
    body = s.accept_shares(answer, cohort.server_roster(), name="h00", missing=["h01", "h02"],
                           identity=cohort.members["h00"].identity.public_key())
    assert sorted(body) == ["h01", "h02"]  # only the missing members' shares leave


def test_recover_is_answered_only_for_the_attempt_this_member_unmasked():
    cohort = Cohort.make(4, max_dropouts=1)
    cohort.publish()
    accepted = cohort.accept({n: cohort.mask(n, np.ones(2)) for n in cohort.members}, 2)
    roster = cohort.server_roster()
    recover = s.build_recover(roster, ["h03"], cohort.coordinator)
    with pytest.raises(RoundRefused, match="did not answer the unmask request of attempt 1"):
        cohort.recover("h00", recover)  # h00 never agreed to reveal this sum
    cohort.answer("h00", cohort.request(accepted))
    with pytest.raises(RoundRefused, match="outside the roster, or me"):
        cohort.recover("h00", s.build_recover(roster, ["h00", "h03"], cohort.coordinator))
    with pytest.raises(SignatureInvalid):
        cohort.recover("h00", s.build_recover(roster, ["h03"], Ed25519PrivateKey.generate()))
    answer = cohort.recover("h00", recover)
    with pytest.raises(PayloadInvalid, match="truncated"):  # one share, two lost neighbours
        s.accept_shares(answer, roster, name="h00", missing=["h02", "h03"],
                        identity=cohort.members["h00"].identity.public_key())
    with pytest.raises(SignatureInvalid):
        s.accept_shares(answer, roster, name="h00", missing=["h03"],
                        identity=cohort.members["h01"].identity.public_key())


def test_member_lost_after_masking_is_recovered_from_shares():
    cohort = Cohort.make(4, max_dropouts=1)  # threshold 3
    vectors = {n: np.arange(5) * (i + 1) for i, n in enumerate(sorted(cohort.members))}
    total = cohort.run(vectors, responders=["h00", "h01", "h03"])
    np.testing.assert_array_equal(total, sum(vectors.values()))


def test_too_few_unmask_answers_abort():
    cohort = Cohort.make(4, max_dropouts=1)
    vectors = {n: np.ones(3, dtype=np.int64) for n in cohort.members}
    with pytest.raises(RoundRefused, match="3 needed"):
        cohort.run(vectors, responders=["h00", "h01"])


def test_sum_needs_every_roster_vector():
    cohort = Cohort.make(4, max_dropouts=1)
    cohort.publish()
    accepted = cohort.accept({n: cohort.mask(n, np.ones(3)) for n in ["h00", "h01", "h02"]}, 3)
    with pytest.raises(RoundRefused, match="every roster member"):
        s.reveal_sum(cohort.server_roster(), accepted, {})
