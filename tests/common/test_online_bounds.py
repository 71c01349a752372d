"""The poisoning bounds of streaming releases (common.online.bounds) and the finite step:
honest noisy sums drawn with the real Gaussian at the worst case always pass; one past the
bound is refused naming it; no input that passes makes a step, an average or a centre
non-finite, and a step that would is refused, never stored."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from common.errors import ModelNotFinite, ReleaseOutOfBounds
from common.online import OnlineParams, centre_from_release, federated_step, project_ball
from common.online.bounds import check_online_release, online_release_bound
from common.online.factor import prefix_sums
from common.online.learner import running_mean, safe_norm

PARAMS = [
    OnlineParams(dim=2, window_slots=1, radius_x=1e-3, epsilon_gradient="10"),
    OnlineParams(dim=50, window_slots=10_000, radius_x=1.0, epsilon_gradient="0.1"),
    OnlineParams(dim=4, window_slots=10_000_000, radius_x=1e3, epsilon_gradient="1"),
]


def honest_releases(params: OnlineParams, centring: bool, count: int) -> list[np.ndarray]:
    """30 honest releases at the worst case: every slot's record (or gradient) at its norm
    bound, all aligned. FTRL: the increments of one member's prefix sums over 30 windows
    (square root over a block of 8 leaves: three restarts; tree: t = 16 releases five node
    levels at once)."""
    direction = np.ones(params.dim) / np.sqrt(params.dim)
    if centring:
        exact = params.window_slots * params.radius_x * direction
        return [params.centre_noise().release(exact) for _ in range(30)]
    if params.algorithm == "flmb":
        return [params.noise().release(count * params.radius_x * direction) for _ in range(30)]
    size = 8 if params.prefix == "sqrt" else params.tree_leaves
    agg = prefix_sums(params.prefix, params.dim, size, params.noise())
    return [agg.increment(count * params.clip * direction) for _ in range(30)]


@pytest.mark.parametrize(("algorithm", "prefix"),
                         [("ftrl", "sqrt"), ("ftrl", "tree"), ("flmb", "sqrt")])
@pytest.mark.parametrize("params", PARAMS, ids=["tiny", "wide", "huge"])
@pytest.mark.parametrize("centring", [False, True], ids=["gradient", "centring"])
def test_honest_worst_case_sums_always_pass(params, centring, algorithm, prefix):
    params = params.model_copy(update={"algorithm": algorithm, "prefix": prefix})
    for count in (0, 1, params.window_slots):
        for noisy in honest_releases(params, centring, count):
            check_online_release(params, noisy, count, centring=centring)


@pytest.mark.parametrize("params", PARAMS, ids=["tiny", "wide", "huge"])
def test_one_past_the_bound_is_refused_naming_it(params):
    bound = online_release_bound(params, 1)
    at = np.zeros(params.dim)
    at[0] = bound
    check_online_release(params, at, 1)
    at[0] = np.nextafter(bound, np.inf) * (1 + 1e-12)
    with pytest.raises(ReleaseOutOfBounds, match=f"public bound is {bound:.6g} = 1 queried"):
        check_online_release(params, at, 1)
    with pytest.raises(ValueError, match="count must be in"):
        online_release_bound(params, params.window_slots + 1)


@pytest.mark.parametrize("value", [1e308, -1e308, np.inf, np.nan])
def test_extreme_and_non_finite_sums_are_refused(value):
    with pytest.raises(ReleaseOutOfBounds, match="l2 norm"):
        check_online_release(PARAMS[1], np.full(PARAMS[1].dim, value), 10)


def test_safe_norm_does_not_overflow_for_finite_entries():
    assert safe_norm(np.array([1e200, 1e200])) == pytest.approx(np.sqrt(2) * 1e200)
    assert safe_norm(np.array([1.5e308, 1.5e308])) == np.inf  # the norm is past the floats
    assert safe_norm(np.array([3.0, 4.0])) == 5.0


@given(arrays(np.float64, 5, elements=st.floats(allow_nan=False, allow_infinity=False)),
       st.floats(1e-300, 1e300))
def test_projection_of_any_finite_vector_is_finite_and_in_the_ball(v, radius):
    out = project_ball(v, radius)
    assert np.all(np.isfinite(out)) and safe_norm(out) <= radius * (1 + 1e-12)


@given(arrays(np.float64, 4, elements=st.floats(allow_nan=False, allow_infinity=False)),
       st.integers(1, 10), st.integers(1, 1000))
def test_a_step_is_finite_in_the_ball_or_refused(noisy_sum, count, t):
    config = PARAMS[1].learner()
    config = type(config)(4, 1.0, 100.0, 1e-3, 10.0)
    w = project_ball(np.full(4, 60.0), 100.0)
    try:
        out = federated_step(w, t, [noisy_sum], [count], config)
    except ModelNotFinite:
        return  # the coordinator keeps the last weights (tests/coordinator/test_release_bounds)
    assert np.all(np.isfinite(out)) and safe_norm(out) <= 100.0 * (1 + 1e-12)
    assert np.all(np.isfinite(running_mean(w, out, t)))


def test_a_step_past_the_float_range_is_refused():
    config = type(PARAMS[1].learner())(4, 1.0, 100.0, 1e-3, 1e307)
    with pytest.raises(ModelNotFinite, match="float range"):
        federated_step(np.zeros(4), 1, [np.full(4, 40.0)], [1], config)
    with pytest.raises(ModelNotFinite, match="float range"):  # the sum itself overflows
        federated_step(np.zeros(4), 1, [np.full(4, 1e308)] * 2, [1, 1], config)


def test_a_non_finite_centre_is_refused():
    with pytest.raises(ModelNotFinite):
        centre_from_release(np.array([np.inf, 1.0, 0.0]), 10)
    np.testing.assert_array_equal(centre_from_release(np.array([20.0, 10.0, 5.0]), 10),
                                  [2.0, 1.0, 0.0])


def test_projection_of_tiny_vectors_stays_in_the_ball():
    """Entries whose squares are subnormal (an example hypothesis once found): the norm is
    computed on the scaled vector, so the projection lands inside the ball."""
    v = np.full(5, 2.33410031e-158)
    radius = 5.219206965203841e-158
    out = project_ball(v, radius)
    assert safe_norm(out) <= radius * (1 + 1e-12)
    assert safe_norm(v) == pytest.approx(np.sqrt(5) * 2.33410031e-158, rel=1e-15)


def test_projection_onto_a_tiny_ball_keeps_its_digits():
    """A radius far below the norm (their quotient subnormal): the projection divides first."""
    out = project_ball(np.array([6.02594613e11, 0.0, 0.0, 0.0, 0.0]), 1e-300)
    assert safe_norm(out) <= 1e-300 * (1 + 1e-12)
