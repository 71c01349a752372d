"""Poisoning bounds of cohort releases (common.cohorts.bounds): honest releases drawn with the
real mechanisms at the extremes of the public parameters always pass; one past the bound is
refused; sums of releases never wrap."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.cohorts.bounds import INT64_MAX, checked_sum, release_bounds
from common.cohorts.dpm_plan import DPMPlan
from common.cohorts.mechanism import RoundMechanism, dpm_leaves, dpm_level, kmeans_round
from common.cohorts.plan import KMeansPlan
from common.errors import ReleaseOutOfBounds, SumOverflow

R = 50  # a small record bound: the honest extremes are reached with few records


def _kmeans(sum_noise: str = "laplace", **kw: object) -> KMeansPlan:
    gauss = {"declared_n": 1000} if sum_noise == "gaussian" else {}
    return KMeansPlan(np.array([-3.0, 0.0]), np.array([2.0, 5.0]), k=2, over=2, rounds=3,
                      epsilon="0.3", sum_noise=sum_noise, **gauss, **kw)  # type: ignore[arg-type]


def _dpm(leaf_noise: str = "laplace") -> DPMPlan:
    gauss = {"declared_n": 1000} if leaf_noise == "gaussian" else {}
    return DPMPlan(np.zeros(4), np.ones(4), "0.3", depth=3, bins=8, dims_per_node=2,
                   leaf_noise=leaf_noise, **gauss)  # type: ignore[arg-type]


MECHANISMS = {
    "kmeans laplace": lambda: kmeans_round(_kmeans(), 0, R),
    "kmeans gaussian": lambda: kmeans_round(_kmeans("gaussian"), 2, R),
    "dpm level": lambda: dpm_level(_dpm(), 2, 16, R),
    "dpm leaves laplace": lambda: dpm_leaves(_dpm(), 3, 40, R),
    "dpm leaves gaussian": lambda: dpm_leaves(_dpm("gaussian"), 3, 40, R),
}


def _extreme(mech: RoundMechanism, side: str) -> np.ndarray:
    """Exact vectors at the honest extremes: every entry at its public low or high end, or
    far past it (clipped by the release, as a participant with more than R records is)."""
    parts = []
    for p in mech.parts:
        assert p.low is not None and p.high is not None
        parts.append({"low": p.low, "high": p.high, "past": p.high * 7 + 10**6}[side])
    return np.concatenate(parts).astype(np.int64)


@pytest.mark.parametrize("side", ["low", "high", "past"])
@pytest.mark.parametrize("kind", sorted(MECHANISMS))
def test_honest_releases_at_the_extremes_are_never_refused(kind: str, side: str) -> None:
    """300 real draws (OpenDP) at epsilon 0.3 over 3 rounds: zero false refusals; the noise
    stays inside each entry's tail, and the tail is not absurdly loose (ln(2 size / 2^-40) <
    40 scales)."""
    mech = MECHANISMS[kind]()
    bounds = release_bounds(mech)
    exact = _extreme(mech, side)
    clipped = np.concatenate([p.clip(x) for p, x in zip(mech.parts, mech.split(exact),
                                                         strict=True)])
    highs = np.concatenate([np.broadcast_to(p.high, (p.size,)) for p in mech.parts])
    tails = bounds.upper - highs
    worst = np.zeros(mech.size, dtype=np.int64)
    for _ in range(300):
        noisy = mech.release(exact)
        bounds.check(noisy)
        worst = np.maximum(worst, np.abs(noisy - clipped))
    assert np.all(worst <= tails) and np.any(worst > 0)
    scales = np.concatenate([np.full(p.size, float(p.scale)) for p in mech.parts])
    assert np.all(tails <= 40 * scales + 2)


@pytest.mark.parametrize("kind", sorted(MECHANISMS))
def test_one_past_the_bound_is_refused_and_the_bound_itself_passes(kind: str) -> None:
    bounds = release_bounds(MECHANISMS[kind]())
    for i in (0, bounds.upper.size - 1):
        at_top, at_bottom = bounds.upper.copy(), bounds.lower.copy()
        bounds.check(at_top)
        bounds.check(at_bottom)
        at_top[i] += 1
        at_bottom[i] -= 1
        with pytest.raises(ReleaseOutOfBounds, match=f"index {i} .*public bound"):
            bounds.check(at_top)
        with pytest.raises(ReleaseOutOfBounds, match=f"index {i} .*public bound"):
            bounds.check(at_bottom)


def test_counts_are_bounded_by_the_record_bound_and_sums_by_the_box() -> None:
    """k-means on [-3, 2] x [0, 5]: grid step 5/4096, so a record adds at most -2458..1638
    and 0..4096 grid units; R records at most R times that, plus the tail."""
    plan = _kmeans()
    mech = kmeans_round(plan, 0, R)
    sums, counts = mech.parts
    assert (sums.low[:2].tolist(), sums.high[:2].tolist()) == ([-R * 2458, 0], [R * 1638, R * 4096])
    assert (counts.low.tolist(), counts.high.tolist()) == ([0] * 4, [R] * 4)
    bounds = release_bounds(mech)
    assert bounds.upper[-1] - R == bounds.upper[-2] - R > 0  # the count tail


def test_three_members_at_two_to_the_62_are_refused_not_wrapped() -> None:
    """The measured wrap: three in-wire values of 2^62 summed to a negative int64."""
    mech = kmeans_round(_kmeans(), 0, R)
    bounds = release_bounds(mech)
    poisoned = np.zeros(mech.size, dtype=np.int64)
    poisoned[0] = 2**62
    with pytest.raises(ReleaseOutOfBounds, match="4611686018427387904"):
        checked_sum([poisoned] * 3, bounds)


def test_a_sum_that_could_pass_int64_is_refused_before_summing() -> None:
    """R = 2^40 and 20-bit sums: one release may hold ~2^61, sixteen could pass int64."""
    mech = kmeans_round(_kmeans(resolution_bits=20), 0, 2**40)
    bounds = release_bounds(mech)
    assert 2**60 < bounds.largest <= INT64_MAX and 16 * bounds.largest > INT64_MAX
    zeros = np.zeros(mech.size, dtype=np.int64)
    np.testing.assert_array_equal(checked_sum([zeros] * 3, bounds), zeros)
    with pytest.raises(SumOverflow, match="could pass int64"):
        checked_sum([zeros] * 16, bounds)
    with pytest.raises(SumOverflow, match="no releases"):
        checked_sum([], bounds)


def test_public_parameters_whose_honest_range_passes_int64_are_refused() -> None:
    with pytest.raises(ValueError, match="past int64"):
        release_bounds(kmeans_round(_kmeans(resolution_bits=30), 0, 2**40))


def test_a_mechanism_without_a_record_bound_has_no_bounds() -> None:
    with pytest.raises(ValueError, match="no public record bound"):
        release_bounds(kmeans_round(_kmeans(), 0))


@settings(max_examples=60, deadline=None)
@given(data=st.data(), members=st.integers(1, 40))
def test_checked_sums_are_exact(data: st.DataObject, members: int) -> None:
    """Any releases inside their bounds sum to the exact (Python int) sum."""
    bounds = release_bounds(MECHANISMS["kmeans gaussian"]())
    lo, hi = bounds.lower, bounds.upper
    rows = [[data.draw(st.integers(int(a), int(b))) for a, b in zip(lo, hi, strict=True)]
            for _ in range(members)]
    total = checked_sum([np.array(r, dtype=np.int64) for r in rows], bounds)
    assert total.tolist() == [sum(col) for col in zip(*rows, strict=True)]


@settings(max_examples=100, deadline=None)
@given(value=st.one_of(st.sampled_from([2**62, -(2**62), INT64_MAX, -INT64_MAX - 1]),
                       st.integers(-(2**63), 2**63 - 1)),
       index=st.integers(0, 10**6))
def test_any_int64_value_is_accepted_only_inside_its_bound(value: int, index: int) -> None:
    bounds = release_bounds(MECHANISMS["dpm leaves gaussian"]())
    i = index % bounds.upper.size
    vector = np.zeros(bounds.upper.size, dtype=np.int64)
    vector[i] = value
    if bounds.lower[i] <= value <= bounds.upper[i]:
        bounds.check(vector)
    else:
        with pytest.raises(ReleaseOutOfBounds, match="public bound"):
            bounds.check(vector)
