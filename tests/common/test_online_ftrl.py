"""DP-FTRL: tree aggregation (prefix sums, node noise, its zCDP calibration) and the learner,
with a neighbouring-streams test of a whole stream's release sequence."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pytest
from online_kit import ALPHA, hockey_stick
from scipy import stats

from common.noise.gradient import GradientNoise, gaussian_scale, make_gradient_noise
from common.online import OnlineParams, to_ball
from common.online.factor import column_norm
from common.online.ftrl import FTRLConfig, OnlineFTRL, ftrl_weights
from common.online.params import SIGNED_AT
from common.online.tree import TreeAggregator, lowbit, node_weights, tree_height, tree_noise
from common.study.canonical import canonical_json, parse_canonical

RNG = np.random.default_rng(5)  # data only; never privacy noise


class Recorder:
    """A node noise that keeps every value it releases, in release order."""

    def __init__(self, noise: GradientNoise) -> None:
        self.noise, self.out = noise, []

    def release(self, v: np.ndarray) -> np.ndarray:
        noisy = self.noise.release(v)
        self.out.append(noisy)
        return noisy


class Sums:
    """No noise: keeps the exact node sums the tree releases."""

    def __init__(self) -> None:
        self.out: list[float] = []

    def release(self, v: np.ndarray) -> np.ndarray:
        self.out.append(float(v[0]))
        return v


def test_tree_shapes() -> None:
    assert [lowbit(t) for t in (1, 2, 3, 4, 6, 8, 12)] == [1, 2, 1, 4, 2, 8, 4]
    assert [tree_height(n) for n in (1, 2, 4, 64)] == [1, 2, 3, 7]
    with pytest.raises(ValueError, match="power of two"):
        tree_height(6)
    with pytest.raises(ValueError, match=">= 1"):
        lowbit(0)
    v = node_weights(4)
    assert v[0] == 1.0 and v[1] == pytest.approx(2 / 3) and v[2] == pytest.approx(4 / 7)


def test_exact_tree_gives_the_prefix_sums_across_restarts() -> None:
    leaves = RNG.normal(size=(21, 3))
    tree = TreeAggregator(3, 8, None)
    for t, leaf in enumerate(leaves, start=1):
        assert np.allclose(tree.add(leaf), leaves[:t].sum(axis=0))
    assert tree.t == 21 - 16  # two full trees, their totals in the base


def test_every_leaf_lies_in_height_released_nodes() -> None:
    """Leaf i's indicator through a full tree of 8 leaves: the released nodes whose sum
    moves are its 4 ancestors (itself included), the sensitivity the noise is set for."""
    for i in range(8):
        sums = Sums()
        tree = TreeAggregator(1, 8, sums)  # type: ignore[arg-type]
        for t in range(8):
            tree.add(np.array([1.0 if t == i else 0.0]))
        assert len(sums.out) == 15 and sum(sums.out) == tree_height(8)


def test_prefix_noise_has_the_bottom_up_variance() -> None:
    """Prefix sums of zero leaves: per coordinate, the noise variance is sigma^2 times the sum
    of the decomposition nodes' v_level (chi-square test at ALPHA, OpenDP draws)."""
    noise = tree_noise(0.5, 1.0, 1e-6, 8)
    dim, v = 4000, node_weights(4)
    tree = TreeAggregator(dim, 8, noise)
    for t in range(1, 8):
        prefix = tree.add(np.zeros(dim))
        levels = [j for j in range(4) if t >> j & 1]
        var = noise.scale**2 * sum(v[j] for j in levels)
        stat = float(np.sum(prefix**2) / var)
        assert stats.chi2(dim).sf(stat) > ALPHA and stats.chi2(dim).cdf(stat) > ALPHA


def test_tree_noise_composes_height_nodes_to_the_target() -> None:
    noise = tree_noise(0.25, 1.0, 1e-6, 64)
    one = gaussian_scale(0.25 * (1 + 1e-9), 1.0, 1e-6)
    assert noise.scale == pytest.approx(one * math.sqrt(7), rel=1e-5)
    assert 0.999 <= noise.accounted_epsilon() <= 1.0
    assert noise.sensitivity == pytest.approx(make_gradient_noise(0.25, 1, 1e-6).sensitivity
                                              * math.sqrt(7))


def test_ftrl_params_charge_and_canonical_form() -> None:
    params = OnlineParams(dim=3)
    assert params.algorithm == "ftrl"
    assert b"algorithm" not in canonical_json(params)  # signed value: omitted, old bytes kept
    cost = params.epoch_cost()
    assert cost.epsilon == Decimal(1) + Decimal(params.rule().epsilon()).quantize(
        Decimal("1e-9"), rounding="ROUND_CEILING")
    assert params.rule().bound == pytest.approx(params.radius_w * params.clip)
    flmb = OnlineParams(dim=3, algorithm="flmb")
    assert b'"algorithm":"flmb"' in canonical_json(flmb)
    # default, square-root factorisation: the clip's share of FLMB's noise, times the largest
    # column norm of A^(1/2) over the 256-leaf horizon; tree: times sqrt(7) for its 7 nodes
    assert params.prefix == "sqrt" and b"prefix" not in canonical_json(params)
    assert params.noise().scale == pytest.approx(
        flmb.noise().scale * params.clip * column_norm(256), rel=1e-5)
    tree = OnlineParams(dim=3, prefix="tree")
    assert b'"prefix":"tree"' in canonical_json(tree)
    assert tree.noise().scale == pytest.approx(flmb.noise().scale * params.clip * math.sqrt(7),
                                               rel=1e-5)
    with pytest.raises(ValueError, match="power of two"):
        OnlineParams(dim=3, tree_leaves=48)


def test_a_moved_default_keeps_the_meaning_of_signed_configs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A default may move without changing a signed study: the canonical form leaves a key
    out only at its signed value (``SIGNED_AT``), and canonical bytes read a missing key as
    that value. Simulated here by a signed value of ``eta`` (0.02) other than its default."""
    monkeypatch.setitem(SIGNED_AT, "eta", 0.02)
    new = OnlineParams(dim=3)
    assert new.eta == 0.01 and b'"eta":0.01' in canonical_json(new)  # written out in full
    assert parse_canonical(OnlineParams, canonical_json(new)) == new
    old = OnlineParams(dim=3, eta=0.02)
    signed = canonical_json(old)
    assert b'"eta"' not in signed
    assert parse_canonical(OnlineParams, signed) == old
    assert canonical_json(parse_canonical(OnlineParams, signed)) == signed  # bytes kept
    assert OnlineParams.model_validate_json(signed).eta == 0.01  # why the context is needed
    dump = old.model_dump(mode="json")  # any other dump is complete: safe to post again
    assert dump["eta"] == 0.02 and OnlineParams.model_validate(dump) == old


def test_learner_steps_every_leaf_labels_from_the_first() -> None:
    cfg = FTRLConfig(dim=3, leaf=4, tree_leaves=8, centre=10, eta=1.0, prefix="tree")
    model = OnlineFTRL(cfg)
    X = RNG.normal(size=(60, 3)) * 0.3
    asked = [model.step(x, lambda: 1) for x in X]
    assert not any(asked[:10])  # the centring records are never queried
    assert model.queried_ == 50 and model.updates_ == 12
    assert model.centre_ is not None and model.centre_[-1] == 0.0
    assert np.allclose(model.w_, ftrl_weights(model.tree.total_, 1.0))


def test_non_private_ftrl_separates_digits() -> None:
    from sklearn.datasets import load_digits

    d = load_digits()
    keep = np.isin(d.target, [0, 9])
    Z = to_ball(d.data[keep], np.zeros(64), np.full(64, 16.0))
    y = np.where(d.target[keep] == 0, 1, -1)
    model = OnlineFTRL(FTRLConfig(dim=65, centre=100, leaf=5))
    for i in RNG.choice(len(y), size=400):
        model.step(Z[i], lambda i=i: int(y[i]))
    assert np.mean(model.predict(Z) != y) < 0.03


def release_sequence(first: np.ndarray, noise: object) -> np.ndarray:
    """A whole stream through the FTRL learner (leaf 1, tree of 4 leaves, every record
    labelled +1): the noisy nodes in release order."""
    rec = Recorder(noise)  # type: ignore[arg-type]
    model = OnlineFTRL(FTRLConfig(dim=1, clip=1.0, radius_x=1.0, leaf=1, tree_leaves=4,
                                  centre=0, eta=3.0, bias=0.0, prefix="tree"),
                       None, rec)  # type: ignore[arg-type]
    for x in (first, np.array([0.5]), np.array([-0.7]), np.array([0.9])):
        model.step(x, lambda: 1)
    return np.array([float(v[0]) for v in rec.out])


@pytest.mark.slow
@pytest.mark.parametrize(("height", "caught"), [(3, False), (1, True)])
def test_whole_release_sequence_on_neighbouring_streams(height: int, caught: bool) -> None:
    """Streams differing in their first slot ([1] against the empty record [0]: gradients -1
    and 0, the C of the noise; delta_g = 0.05 so that the control's excess is large). The later
    gradients depend on the released nodes (hinge at the FTRL weights). The sum of the
    released nodes that hold leaf 1 (the likelihood ratio's statistic) stays within the
    charged (eps_g, delta_g) with the tree's noise; noise set for one node per leaf
    (ignoring the tree's height) is caught."""
    right = tree_noise(1.0, 1.0, 0.05, 4)  # a large delta, so that a violation is visible
    noise = right if height == 3 else make_gradient_noise(1.0, 1.0, 0.05)
    holds = [0, 2, 6]  # leaf 1's nodes: level 0 at t=1, level 1 at t=2, level 2 at t=4
    n = 2000
    a = np.array([release_sequence(np.array([1.0]), noise)[holds].sum() for _ in range(n)])
    b = np.array([release_sequence(np.array([0.0]), noise)[holds].sum() for _ in range(n)])
    delta_hat = hockey_stick(a, b, right.epsilon)
    if caught:  # its true delta at eps_g is about 0.15
        assert delta_hat > right.delta + 0.05
    else:
        assert delta_hat <= right.delta + 0.03
