"""Streaming mode's pure parts: the config's online section, its charge, the wire format, the
federated step, and a statistical privacy test of a whole stream on neighbouring streams."""

from __future__ import annotations

import json
import math
from decimal import Decimal

import numpy as np
import pytest
from online_kit import hockey_stick
from pydantic import ValidationError

from common.online import (
    OnlineConfig,
    OnlineParams,
    OnlineSVM,
    apply_step,
    federated_step,
    to_ball,
)
from common.online.wire import decode_vector, encode_vector
from common.study.config import FeatureSpec, PrivacyParams, new_study_config

FEATURES = [FeatureSpec(name=n, lo=0.0, hi=2.0) for n in ("a", "b")]


def config(online: OnlineParams | None = None):
    return new_study_config("s", FEATURES, privacy=PrivacyParams(epsilon_lsh=Decimal(1)),
                            n_tables=3, online=online, seed=bytes(32))


def test_configs_without_an_online_section_keep_their_canonical_form() -> None:
    assert "online" not in json.loads(config().model_dump_json())
    with_online = json.loads(config(OnlineParams(dim=3)).model_dump_json())
    assert with_online["online"]["epsilon_select"] == "1"  # decimals travel as strings


def test_online_section_is_checked() -> None:
    with pytest.raises(ValidationError, match="number of features"):
        config(OnlineParams(dim=5))
    with pytest.raises(ValidationError, match="float"):
        OnlineParams(dim=3, epsilon_gradient=0.5)
    with pytest.raises(ValidationError, match="must be > 0"):
        OnlineParams(dim=3, epsilon_select="0")
    with pytest.raises(ValidationError, match="delta_gradient"):
        OnlineParams(dim=3, delta_gradient="0.5")


@pytest.mark.parametrize("p", [0.1, 0.78])
def test_epoch_cost_is_the_true_selection_epsilon_plus_the_gradient(p: float) -> None:
    params = OnlineParams(dim=3, p=p, epsilon_select="1", epsilon_gradient="0.5",
                          delta_gradient="0.000001")
    cost = params.epoch_cost()
    true_eps = params.rule().epsilon()
    assert true_eps <= 1.0 + 1e-12
    assert cost.epsilon - Decimal("0.5") == Decimal(true_eps).quantize(
        Decimal("1e-9"), rounding="ROUND_CEILING")
    assert cost.delta == Decimal("0.000001")


def test_randomized_response_rule_costs_its_epsilon() -> None:
    params = OnlineParams(dim=3, query="randomized_response", epsilon_select="0.5", tau=0.2)
    rule = params.rule()
    assert rule.probability(0.1) == pytest.approx(math.exp(0.5) / (1 + math.exp(0.5)))
    assert params.epoch_cost().epsilon == Decimal("1.5")


def test_to_ball_uses_public_bounds_only() -> None:
    X = np.array([[0.0, 2.0], [1.0, 1.0], [50.0, -3.0]])
    Z = to_ball(X, np.zeros(2), np.full(2, 2.0), radius=1.0)
    assert Z.shape == (3, 3)
    assert np.all(np.linalg.norm(Z, axis=1) <= 1.0 + 1e-12)
    np.testing.assert_allclose(Z[2], Z[0][[1, 0, 2]])  # clipped to the bounds
    np.testing.assert_allclose(Z[:, 2], 1 / math.sqrt(3))


def test_vectors_round_trip_and_bad_ones_are_refused() -> None:
    v = np.array([1.5, -2.25, 1e-300])
    np.testing.assert_array_equal(decode_vector(encode_vector(v), 3), v)
    with pytest.raises(ValueError, match="3 float64"):
        decode_vector(encode_vector(v[:2]), 3)
    with pytest.raises(ValueError, match="finite"):
        decode_vector(encode_vector(np.array([np.inf])), 1)
    with pytest.raises(ValueError, match="base64"):
        decode_vector("not base64!", 1)


def test_federated_step_is_one_step_on_the_summed_releases() -> None:
    cfg = OnlineConfig(dim=2, lam=0.1)
    w = np.array([0.5, -0.5])
    sums, counts = [np.array([1.0, 2.0]), np.array([-3.0, 0.5])], [2, 3]
    np.testing.assert_allclose(federated_step(w, 4, sums, counts, cfg),
                               apply_step(w, 4, np.array([-2.0, 2.5]), 5, cfg))
    with pytest.raises(ValueError, match="one count per"):
        federated_step(w, 1, sums, [1], cfg)


def final_weight(stream: list[np.ndarray], labels: list[int], params: OnlineParams,
                 learner: OnlineConfig | None = None) -> float:
    svm = OnlineSVM(learner or params.learner(), params.rule(), params.noise())
    for x, y in zip(stream, labels, strict=True):
        svm.step(x, lambda y=y: y)
    svm.flush()
    return float(svm.w_.sum())


@pytest.mark.slow
def test_whole_stream_privacy_on_neighbouring_streams() -> None:
    """Streams differing in one slot (a record against the empty, zero record): a statistic
    of the released weights stays within the charged (eps_s + eps_g, delta_g). Control: the
    same learner without the projection into the ball of M = 1 (a record of norm 40 against
    noise set for M = 1) is caught."""
    params = OnlineParams(dim=2, batch=2, p=0.9, radius_w=1000.0, eta0=2.0,
                          epsilon_select="1", epsilon_gradient="1", delta_gradient="0.000001")
    base, labels = [np.array([0.6, 0.8])], [-1, 1]
    charged = float(params.epoch_cost().epsilon)
    n = 2000

    def run(odd: np.ndarray, learner: OnlineConfig | None = None) -> np.ndarray:
        return np.array([final_weight([*base, odd], labels, params, learner)
                         for _ in range(n)])

    a, b = run(np.array([0.0, 1.0])), run(np.zeros(2))
    assert hockey_stick(a, b, charged) <= 1e-6 + 0.03
    unprojected = OnlineConfig(**{**params.learner().__dict__, "radius_x": 100.0})
    c = run(np.array([0.0, 40.0]), unprojected)
    assert hockey_stick(b, c, charged) > 0.05


def test_schedule_windows_follow_the_public_calendar() -> None:
    params = OnlineParams(dim=3, window_seconds=60, window_origin=120)
    assert [params.window_at(t) for t in (0, 119.9, 120, 179.9, 180)] == [-2, -1, 0, 0, 1]
    assert params.window_end(0) == 180
    legacy = OnlineParams.model_validate({"dim": 3, "epoch_records": 70})  # signed before
    assert legacy.window_slots == 70


def test_window_batch_counts_every_queried_slot_and_pads_with_empty_records() -> None:
    from common.online import ExponentialRule, pad_queries, window_batch

    z1, z2, z3 = np.array([0.6, 0.0]), np.array([0.0, 0.8]), np.array([0.3, 0.4])
    rule = ExponentialRule(p=0.3, b=0.1, bound=10.0)
    total, count = window_batch(np.zeros(2), [(z1, 1), (z2, None), (z3, -1)], 0, rule)
    np.testing.assert_allclose(total, -z1 + z3)  # unanswered: zero gradient, still counted
    assert count == 3
    n = 4000
    padded = pad_queries(rule, n)  # empty records: margin 0, queried with q(0) = p
    assert abs(padded - 0.3 * n) < 5 * math.sqrt(n * 0.3 * 0.7)
    with pytest.raises(ValueError, match=">= 0"):
        pad_queries(rule, -1)
