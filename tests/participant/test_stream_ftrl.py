"""DP-FTRL in ``fedod-participant stream`` (coordinator faked): each window is a leaf of the
member's prefix-sum mechanism (square-root factorisation by default, or the tree) and its
release is the prefix increment; the noisy releases are kept in the stream file, so a restart
goes on with them and never redraws one; FLMB still releases one noisy batch sum per window."""

from __future__ import annotations

import numpy as np
import pytest
from stream_kit import ONLINE, SLOTS, Exact, Run

from common.errors import ConfigError
from common.online import to_ball
from common.online.factor import prefix_sums, sqrt_coefficients
from common.online.learner import hinge_gradient
from common.online.wire import decode_vector


def window_sum(run: Run, first: int, n: int) -> np.ndarray:
    """The exact gradient sum of the queried records ``first .. first + n - 1`` (all labelled
    +1, zero weights served: every gradient is ``-x``)."""
    rng = np.random.default_rng(first)
    rows = to_ball(np.array([rng.uniform(0, 1, size=2) for _ in range(n)]), np.zeros(2),
                   np.ones(2), 1.0)
    feats = ONLINE.rows(rows, None)
    queried = {rid for (rid,) in run.store._db.execute("SELECT id FROM records WHERE queried=1")}
    return sum((hinge_gradient(np.zeros(3), z, 1) for i, z in enumerate(feats, start=first)
                if f"r{i}" in queried), np.zeros(3))


def label_all(run: Run, first: int, n: int) -> None:
    for i in range(first, first + n):
        run.streamer.label(f"r{i}", 1)


def run_windows(run: Run, windows: range, sums: list[np.ndarray]) -> None:
    for window in windows:
        run.feed(SLOTS, start=100 * window)
        label_all(run, 100 * window, SLOTS)
        sums.append(window_sum(run, 100 * window, SLOTS))
        run.to(window + 1)


def test_each_window_releases_its_prefix_increment_and_a_restart_keeps_the_tree(tmp_path):
    """The tree (``prefix: tree``): leaves 1, 2, 3 release nodes [1], [1], [1..2], [3]."""
    tree = ONLINE.model_copy(update={"prefix": "tree"})
    run = Run(tmp_path, online=tree)
    run.streamer.noise = exact = Exact()  # type: ignore[assignment]
    sums: list[np.ndarray] = []
    run_windows(run, range(3), sums)
    first_posts = run.coordinator.posts
    run.close()
    assert len(exact.calls) == 4
    np.testing.assert_allclose(exact.calls[2], sums[0] + sums[1])
    again = Run(tmp_path, online=tree)  # a restart: the tree comes back from the stream file
    again.streamer.noise = more = Exact()  # type: ignore[assignment]
    run_windows(again, range(3, 4), sums)
    assert len(more.calls) == 3  # leaf 4: levels 0, 1, 2; nothing of leaves 1-3 redrawn
    np.testing.assert_allclose(more.calls[2], sum(sums))
    posts = first_posts + again.coordinator.posts
    assert [p["window"] for p in posts] == [0, 1, 2, 3]
    increments = [decode_vector(p["noisy_sum"], 3) for p in posts]
    for inc, exact_sum in zip(increments, sums, strict=True):  # exact: increment = leaf
        np.testing.assert_allclose(inc, exact_sum, atol=1e-12)
    again.close()


def test_the_square_root_releases_one_mix_per_window_and_a_restart_keeps_them(tmp_path):
    """The default (``prefix: sqrt``): window t releases sum_i c_{t-i} x_i once; after a
    restart the earlier releases come back from the stream file, none redrawn."""
    assert ONLINE.algorithm == "ftrl" and ONLINE.prefix == "sqrt"
    run = Run(tmp_path)
    run.streamer.noise = exact = Exact()  # type: ignore[assignment]
    sums: list[np.ndarray] = []
    run_windows(run, range(3), sums)
    first_posts = run.coordinator.posts
    run.close()
    c = sqrt_coefficients(ONLINE.horizon)
    assert len(exact.calls) == 3
    np.testing.assert_allclose(exact.calls[2], c[2] * sums[0] + c[1] * sums[1] + sums[2])
    again = Run(tmp_path)
    again.streamer.noise = more = Exact()  # type: ignore[assignment]
    run_windows(again, range(3, 4), sums)
    [call] = more.calls  # leaf 4 only: nothing of leaves 1-3 redrawn
    np.testing.assert_allclose(call, sum(c[3 - i] * x for i, x in enumerate(sums)))
    posts = first_posts + again.coordinator.posts
    assert [p["window"] for p in posts] == [0, 1, 2, 3]
    for post, exact_sum in zip(posts, sums, strict=True):  # exact: increment = leaf
        np.testing.assert_allclose(decode_vector(post["noisy_sum"], 3), exact_sum, atol=1e-12)
    again.close()


def test_the_stored_state_holds_the_noisy_releases(tmp_path):
    run = Run(tmp_path)
    for window in range(2):
        run.feed(SLOTS, start=100 * window)
        label_all(run, 100 * window, SLOTS)
        run.to(window + 1)
    agg = prefix_sums(ONLINE.prefix, 3, ONLINE.block, None, run.store.get("tree"))
    total = sum(decode_vector(p["noisy_sum"], 3) for p in run.coordinator.posts)
    np.testing.assert_allclose(agg.total_, total)  # the increments add up to its prefix
    assert agg.t == 2
    run.close()


def test_flmb_still_releases_one_noisy_batch_per_window(tmp_path):
    flmb = ONLINE.model_copy(update={"algorithm": "flmb"})
    run = Run(tmp_path, online=flmb)
    run.streamer.noise = exact = Exact()  # type: ignore[assignment]
    run.feed(SLOTS)
    label_all(run, 0, SLOTS)
    run.to(1)
    [call] = exact.calls
    [post] = run.coordinator.posts
    np.testing.assert_allclose(decode_vector(post["noisy_sum"], 3), call)
    assert run.store.get("tree") is None
    run.close()


def test_a_stored_tree_under_a_square_root_config_stops_the_stream_before_anything(tmp_path):
    """A stream whose state is a tree, resumed under a config that now means the square root
    (e.g. signed before `prefix` existed, read at the new default): ConfigError (exit 4)
    naming the fix, nothing posted again."""
    run = Run(tmp_path, online=ONLINE.model_copy(update={"prefix": "tree"}))
    run_windows(run, range(1), [])
    posts = len(run.coordinator.posts)
    run.close()
    with pytest.raises(ConfigError, match="not a square-root.*stream.sqlite3 aside"):
        Run(tmp_path, coordinator=run.coordinator)
    assert len(run.coordinator.posts) == posts
