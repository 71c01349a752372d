"""Poisoning bounds of streaming releases: the largest l2 norm an honest noisy sum can have.

Every input of a streaming release is public except the records, and the records are
projected into the ball of radius ``M = radius_x`` before they are used
(:func:`common.online.learner.project_ball`):

- **gradient release** of ``count`` queried slots: each slot adds a hinge subgradient ``-y x``
  or ``0`` with ``||x|| <= M`` (centred records are projected again), so the exact sum has norm
  at most ``count * M``; unanswered queries and padded slots add 0;
- **centring release**: the sum of the window's ``window_slots`` projected records (empty
  slots are the zero record), norm at most ``window_slots * M``.

With DP-FTRL (the default) a gradient release is a member's prefix increment: its exact part
is the window's gradient sum (each gradient of norm at most the clip radius ``C``). Its noise,
with the square-root factorisation (``prefix: sqrt``), is ``(B z)_t - (B z)_{t-1} = z_t +
sum_{k >= 1} (c_k - c_{k-1}) z_{t-k}``: per coordinate one Gaussian of standard deviation at
most ``sqrt(2)`` release scales (``sum (c_{k-1} - c_k)^2 <= (sum (c_{k-1} - c_k))^2 <= c_0^2
= 1``); with the tree, a difference of at most ``height`` node estimates (scale at most
``height`` node scales). With
FLMB and for the centring window the noise is one OpenDP Gaussian draw of scale ``sigma``. In
``dim`` coordinates such a Gaussian's norm exceeds
:func:`common.noise.tails.gaussian_norm_tail` with probability at most ``beta`` (default
``2**-40``). An honest release is therefore refused by mistake with probability below
``beta``; a release past the bound is refused before anything is stored or charged. The exact
part carries a relative slack of ``1e-9`` for float rounding in the projection and the sum
(as :mod:`common.noise.gradient` does for the sensitivity).

The ``count`` of a gradient release is the number of queried slots of the window: a function
of the private (``epsilon_select``-DP) query decisions, post-processing, bounded by the public
``window_slots``; the centring window's count is ``window_slots`` itself.

What the bound cannot catch: a member sending any vector inside the ball (for instance a
gradient sum pointing the wrong way) is indistinguishable from an honest one without proofs of
input validity. With FLMB its effect on one step is bounded by ``eta_t`` times the bound over
the step's total count, and the weights stay in the ball of ``radius_w``; with DP-FTRL it moves
the weights by at most ``eta`` times the bound, once per window, and the sum stays (the
prefix sum is never forgotten: a poisoned increment has to be outweighed by later honest
ones).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from common.errors import ReleaseOutOfBounds
from common.noise.tails import FAILURE_PROBABILITY, gaussian_norm_tail
from common.online.learner import safe_norm
from common.online.params import OnlineParams
from common.online.tree import tree_height

__all__ = ["check_online_release", "online_release_bound"]

_SLACK = 1 + 1e-9


def online_release_bound(params: OnlineParams, count: int, *, centring: bool = False,
                         beta: float = FAILURE_PROBABILITY) -> float:
    """Largest l2 norm of an honest noisy sum of ``count`` gradients (``centring``: of the
    centring window's ``window_slots`` records), noise tail at ``beta`` (module docstring)."""
    if not 0 <= count <= params.window_slots:
        raise ValueError(f"count must be in [0, {params.window_slots}], got {count}")
    count = params.window_slots if centring else count
    return (count * _radius(params, centring) * _SLACK
            + gaussian_norm_tail(_scale(params, centring), params.dim, beta=beta))


def _radius(params: OnlineParams, centring: bool) -> float:
    """Norm bound of one slot's term: its record (centring), or its gradient (``C`` for
    FTRL, ``M`` for FLMB)."""
    return params.clip if params.algorithm == "ftrl" and not centring else params.radius_x


def _scale(params: OnlineParams, centring: bool) -> float:
    """Per-coordinate noise scale bound: one draw (centring, FLMB); ``sqrt(2)`` release scales
    for a square-root increment (module docstring); ``height`` node scales for a tree
    increment (a difference of node estimates, each of variance at most one node's: its
    standard deviation is at most their number, by the triangle inequality)."""
    if centring or params.algorithm == "flmb":
        return params.centre_noise().scale
    if params.prefix == "sqrt":
        return math.sqrt(2) * params.noise().scale
    return tree_height(params.tree_leaves) * params.noise().scale


def check_online_release(params: OnlineParams, noisy_sum: NDArray[np.float64], count: int, *,
                         centring: bool = False, beta: float = FAILURE_PROBABILITY) -> None:
    """Refuse (:class:`~common.errors.ReleaseOutOfBounds`, 422) a noisy sum whose l2 norm is
    past :func:`online_release_bound`, or any non-finite value."""
    bound = online_release_bound(params, count, centring=centring, beta=beta)
    norm = safe_norm(noisy_sum)
    if math.isfinite(norm) and norm <= bound:
        return
    what = (f"{params.window_slots} records of the centring window" if centring
            else f"{count} queried slots")
    raise ReleaseOutOfBounds(
        f"noisy_sum has l2 norm {norm:.6g}; the public bound is {bound:.6g} = {what} x "
        f"{_radius(params, centring):g} + the Gaussian noise's norm tail (scale "
        f"{_scale(params, centring):.6g}, dim {params.dim}) at failure probability {beta:.3g}. An "
        "honest release exceeds it with at most that probability; nothing was stored or "
        "charged", norm=norm, bound=bound)
