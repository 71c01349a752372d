"""Centring the online learner's records on a released noisy mean (``OnlineConfig.centre``)."""

from __future__ import annotations

import numpy as np
import pytest
from online_kit import hockey_stick

from common.online import (
    OnlineConfig,
    OnlineParams,
    OnlineSVM,
    RandomizedResponseRule,
    centre_batch,
    centre_from_release,
    centred_rows,
    make_gradient_noise,
    project_ball,
    project_rows,
    to_ball,
)

RNG = np.random.default_rng(23)  # data only; never privacy noise
ALWAYS = RandomizedResponseRule(p=1 - 1e-12, tau=1e9)
"""Queries (almost) every record: the tests need labels, not a private rule."""


def test_centre_from_release_is_the_mean_without_the_bias() -> None:
    centre = centre_from_release(np.array([4.0, -2.0, 8.0]), 4)
    np.testing.assert_array_equal(centre, [1.0, -0.5, 0.0])
    with pytest.raises(ValueError, match="at least one record"):
        centre_from_release(np.zeros(3), 0)
    with pytest.raises(ValueError, match="centre >= 0"):
        OnlineConfig(dim=3, centre=-1)


def test_project_rows_is_project_ball_per_row() -> None:
    rows = RNG.normal(size=(300, 4)) * 2
    expected = np.array([project_ball(r, 1.5) for r in rows])
    np.testing.assert_allclose(project_rows(rows, 1.5), expected, rtol=1e-12)


def test_centring_records_are_never_queried_and_fix_the_centre() -> None:
    k, dim = 20, 4
    svm = OnlineSVM(OnlineConfig(dim=dim, centre=k, batch=5), rule=ALWAYS)
    rows = RNG.normal(size=(60, dim))
    labels: list[int] = []
    for i, x in enumerate(rows):
        asked = svm.step(x, lambda: labels.append(1) or 1)
        assert asked == (i >= k)  # the rule queries every later record
        assert (svm.centre_ is None) == (i < k - 1)
    assert svm.seen_ == 60 and svm.queried_ == len(labels) == 40
    exact = project_rows(rows[:k], 1.0).sum(axis=0) / k
    exact[-1] = 0.0
    np.testing.assert_allclose(svm.centre_, exact)  # noise=None: the exact mean
    assert svm.updates_ == 8  # 40 labels in batches of 5: centring records add none


def test_centred_records_stay_in_the_ball() -> None:
    """Whatever the (noisy) centre, a centred record is projected back into the ball of M, so
    a gradient's sensitivity stays M."""
    svm = OnlineSVM(OnlineConfig(dim=3, radius_x=0.5, centre=1))
    svm.step(np.zeros(3), lambda: 1)
    svm.centre_ = np.array([40.0, -30.0, 0.0])  # as if the noise were enormous
    feats = svm.features(RNG.normal(size=(100, 3)) * 5)
    assert np.all(np.linalg.norm(feats, axis=1) <= 0.5 * (1 + 1e-12))


@pytest.mark.parametrize(("project", "caught"), [(True, False), (False, True)])
def test_centre_release_on_neighbouring_streams(project: bool, caught: bool) -> None:
    """Streams differing in one centring slot (a record against the empty record): the
    learner's centring sums differ by at most M and the released centre keeps the charged
    (eps, delta); a sum of unprojected records (norm 5, sensitivity 5) is caught."""
    noise = make_gradient_noise(radius=1.0, epsilon=1.0, delta=1e-6)
    rest = [np.array([0.3]), np.array([-0.8])]

    def centring_sum(odd: np.ndarray) -> float:
        if not project:
            return float(sum([*rest, odd])[0])
        svm = OnlineSVM(OnlineConfig(dim=1, centre=3))
        for x in [*rest, odd]:
            svm.step(x, lambda: 1)
        return float(svm._centre_sum[0])

    a_sum, b_sum = centring_sum(np.array([5.0])), centring_sum(np.array([0.0]))  # empty record
    assert (abs(a_sum - b_sum) <= noise.sensitivity) != caught
    n = 12_000
    a = noise.release(np.full(n, a_sum))  # n independent releases of stream A's centre sum
    b = noise.release(np.full(n, b_sum))
    delta_hat = hockey_stick(a, b, noise.epsilon)
    if caught:
        assert delta_hat > 0.05
    else:
        assert delta_hat <= noise.delta + 0.02


def test_centring_removes_the_class_imbalance_offset_on_digits() -> None:
    """One non-private step on a batch of 65 zeros and 35 nines (digits, public [-1, 1] pixel
    map): the direction sum y x carries the records' common component (blank pixels) weighted
    by the imbalance and calls most nines zeros; centred on the mean of 200 records it does
    not."""
    from sklearn.datasets import load_digits

    d = load_digits()
    keep = np.isin(d.target, [0, 9])
    X = to_ball(d.data[keep], np.zeros(64), np.full(64, 16.0))
    y = np.where(d.target[keep] == 0, 1, -1)
    zeros, nines = RNG.permutation(np.flatnonzero(y == 1)), RNG.permutation(np.flatnonzero(y == -1))
    batch = RNG.permutation(np.concatenate([zeros[:65], nines[:35]]))
    centring = RNG.choice(len(y), size=200)
    errors = []
    for k in (0, 200):
        svm = OnlineSVM(OnlineConfig(dim=65, radius_w=100.0, eta0=10.0, batch=100, centre=k),
                        rule=ALWAYS)
        for i in [*centring[:k], *batch]:
            svm.step(X[i], lambda i=i: int(y[i]))
        assert svm.updates_ == 1
        errors.append(float(np.mean(svm.predict(X) != y)))
    assert errors[0] > 0.25
    assert errors[1] < 0.03


def test_centred_rows_is_what_the_learner_uses() -> None:
    svm = OnlineSVM(OnlineConfig(dim=3, radius_x=0.5, centre=1))
    svm.step(np.ones(3), lambda: 1)
    rows = RNG.normal(size=(50, 3))
    np.testing.assert_array_equal(svm.features(rows), centred_rows(rows, svm.centre_, 0.5))
    np.testing.assert_array_equal(centred_rows(rows, None, 0.5), project_rows(rows, 0.5))


def test_centre_batch_sums_the_used_slots_and_counts_every_slot() -> None:
    rows = [np.array([0.3, 0.4]), np.array([6.0, 8.0])]  # the second is projected to norm 1
    total, count = centre_batch(rows, dim=2, slots=5, radius=1.0)
    np.testing.assert_allclose(total, [0.9, 1.2])
    assert count == 5  # public: empty slots add zero but count
    np.testing.assert_array_equal(centre_batch([], 2, 5, 1.0)[0], np.zeros(2))
    with pytest.raises(ValueError, match="3 records for a window of 2 slots"):
        centre_batch(rows + rows[:1], 2, 2, 1.0)
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        OnlineParams(dim=3, centre_window=-1)
    params = OnlineParams(dim=3, centre_window=4)
    assert params.is_centre(4) and not params.is_centre(5) and params.before_centre(3)
    assert not OnlineParams(dim=3).is_centre(0) and not OnlineParams(dim=3).before_centre(0)


@pytest.mark.parametrize("other", [np.array([0.0]), None], ids=["empty record", "unused slot"])
def test_stream_centring_release_on_neighbouring_windows(other: np.ndarray | None) -> None:
    """The stream's centring release (:func:`centre_batch`, then the gradient noise): windows
    differing in one slot (a record against the empty record, written out or left unused)
    give sums at most M apart, and the release keeps the charged (eps, delta). A record
    replaced by another is two slots: up to 2 M apart, more than one slot's noise covers."""
    noise = make_gradient_noise(radius=1.0, epsilon=1.0, delta=1e-6)
    rest = [np.array([0.3]), np.array([-0.8])]
    a_sum = float(centre_batch([*rest, np.array([5.0])], 1, 4, 1.0)[0][0])
    b_sum = float(centre_batch([*rest, *([] if other is None else [other])], 1, 4, 1.0)[0][0])
    assert abs(a_sum - b_sum) <= noise.sensitivity
    replaced = float(centre_batch([*rest, np.array([-5.0])], 1, 4, 1.0)[0][0])
    assert noise.sensitivity < abs(a_sum - replaced) <= 2 * noise.sensitivity
    n = 12_000
    a = noise.release(np.full(n, a_sum))
    b = noise.release(np.full(n, b_sum))
    assert hockey_stick(a, b, noise.epsilon) <= noise.delta + 0.02


def test_configs_signed_before_centring_keep_their_canonical_form() -> None:
    """``centre_window`` is omitted from the JSON when null: an online section signed before
    it re-canonicalises to the same bytes, so its signature still verifies."""
    from common.study.config import canonical_json

    old = {"dim": 3, "window_slots": 20}
    assert canonical_json(OnlineParams.model_validate(old)) == canonical_json(
        OnlineParams(dim=3, window_slots=20))
    assert b"centre_window" not in canonical_json(OnlineParams.model_validate(old))
    centred = OnlineParams(dim=3, centre_window=2)
    doc = centred.model_dump(mode="json")
    assert doc["centre_window"] == 2 and OnlineParams.model_validate(doc) == centred
