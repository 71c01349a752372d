"""DP-FTRL: a private online linear SVM that learns every few labels (Kairouz et al., ICML 2021).

Follow-the-regularised-leader on the hinge loss with noisy prefix sums of the gradients: the
square-root factorisation of :mod:`common.online.factor` (default, ``prefix = "sqrt"``) or the
tree aggregation of :mod:`common.online.tree` (``prefix = "tree"``). Each arriving record is
projected into the ball of ``M`` (``radius_x``), centred once a centre is released (as
:mod:`common.online.learner`: the first ``centre`` records are never queried, their noisy sum is
released once) and projected into the ball of the clip radius ``C`` (``clip``); its margin
against the current weights scores it and drives the private query rule. A labelled record adds
its hinge subgradient ``-y x`` (or 0, norm at most ``C``) to the open leaf; every ``leaf``
labels the leaf is closed, the mechanism makes its releases for it and the weights become

    w = -eta P~_t,

``P~_t`` the noisy prefix sum of every gradient so far: the minimiser of
``<P~_t, w> + |w|^2 / (2 eta)`` (FTRL with a quadratic regulariser, unconstrained; ``R``,
``radius_w``, only bounds the margins the query rule sees, which clips them at ``R C``).
The noise in ``w`` is the noise of one prefix sum (variance growing like ``log t``), not the sum
of one draw per step as in the per-batch-noise learner (FLMB,
:class:`~common.online.learner.OnlineSVM`), so small leaves no longer drown the model.

Privacy, per slot (it holds a record or the empty record, :mod:`common.online.params`): its
query decision
(``epsilon_s``, pure) and, if labelled, its gradient in one leaf: ``(epsilon_g, delta_g)`` for
the whole block, by zCDP over the releases that hold the leaf
(:func:`common.online.factor.factor_noise`, :func:`common.online.tree.tree_noise`).
A centring record is never queried and enters one release, the centring sum (sensitivity
``M``, its own Gaussian at ``(epsilon_g, delta_g)``). Leaf boundaries are fixed by the
sequence of query decisions, identical in neighbouring streams once the differing slot's
decision is equal. Total: ``(epsilon_s + epsilon_g, delta_g)`` per slot
(:func:`common.online.accounting.record_cost` with the mechanism's noise).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
from numpy.typing import NDArray

from common.errors import ModelNotFinite
from common.online.factor import prefix_sums
from common.online.learner import (
    centre_from_release,
    hinge_gradient,
    project_ball,
    project_rows,
)
from common.online.query import QueryRule, bernoulli

if TYPE_CHECKING:
    from common.noise.gradient import GradientNoise

__all__ = ["FTRLConfig", "OnlineFTRL", "ftrl_rows", "ftrl_step", "ftrl_weights",
           "shrink_features"]

Vector = NDArray[np.float64]


@dataclass(frozen=True)
class FTRLConfig:
    """Public hyperparameters of DP-FTRL (they go in the signed study config)."""

    dim: int
    radius_x: float = 1.0
    """M: raw records (and so the centring sum's terms) are projected into this ball."""
    clip: float = 0.5
    """C: centred records are projected into this ball; gradient sensitivity ``C``."""
    eta: float = 0.01
    radius_w: float = 100.0
    """R: the query rule's margin bound is ``R C`` (margins past it are clipped there)."""
    leaf: int = 10
    """Labels per tree leaf: the weights change every ``leaf`` labels."""
    tree_leaves: int = 64
    """Leaves per tree (a power of two); a new tree starts on the last one's noisy total."""
    centre: int = 500
    """Records (never queried) whose noisy mean centres every later record; 0: none."""
    bias: float = 0.25
    """The constant feature as a fraction of ``C`` (:func:`ftrl_rows`); 0: the record's own."""
    prefix: Literal["sqrt", "tree"] = "sqrt"
    """Prefix-sum noise: square-root factorisation (:mod:`common.online.factor`) or tree."""
    horizon: int = 256
    """Leaves per square-root block (its sensitivity grows like sqrt(log horizon))."""
    shrink: bool = False
    """Predict with the feature weights shrunk by the public noise variance
    (:func:`shrink_features`); the bias weight is kept."""

    def __post_init__(self) -> None:
        if not 0 <= self.bias < 1:
            raise ValueError(f"bias must be in [0, 1), got {self.bias}")
        if self.dim < 1 or self.leaf < 1 or self.centre < 0:
            raise ValueError("dim and leaf must be >= 1, centre >= 0")
        if not (self.radius_x > 0 and self.clip > 0 and self.eta > 0 and self.radius_w > 0):
            raise ValueError("radius_x, clip, eta and radius_w must be > 0")
        if self.tree_leaves < 1 or self.tree_leaves & (self.tree_leaves - 1):
            raise ValueError(f"tree_leaves must be a power of two, got {self.tree_leaves}")
        if self.prefix not in ("sqrt", "tree") or self.horizon < 1:
            raise ValueError("prefix must be 'sqrt' or 'tree' and horizon >= 1")

    @property
    def block(self) -> int:
        """Leaves per block of the prefix-sum mechanism (tree or square-root block)."""
        return self.horizon if self.prefix == "sqrt" else self.tree_leaves

    @property
    def margin_bound(self) -> float:
        """Public bound ``R * C`` on ``|<w, x>|`` for the exponential query rule."""
        return self.radius_w * self.clip


def ftrl_weights(prefix: Vector, eta: float) -> Vector:
    """``argmin_w <prefix, w> + |w|^2 / (2 eta)``: ``-eta prefix`` (post-processing of the
    noisy prefix sum). Unconstrained, so the weights after a sum of releases are the weights
    before minus ``eta`` times the sum: what the coordinator does with the members' prefix
    increments (:func:`ftrl_step`)."""
    w = -eta * np.asarray(prefix, dtype=np.float64)
    if not np.all(np.isfinite(w)):
        raise ModelNotFinite("the FTRL weights would leave the float range")
    return w


def shrink_features(w: Vector, variance: float) -> Vector:
    """Positive-part James-Stein shrinkage of the feature weights ``w[:-1]`` towards 0, the
    bias weight ``w[-1]`` kept: ``w[:-1] (1 - (k - 2) s^2 / |w[:-1]|^2)_+`` with ``s^2`` the
    per-coordinate noise variance of the weights (public: from the noise scale, the step
    count and the horizon) and ``k = len(w) - 1``. When the released weights are no larger
    than their noise, the features drop out and the prediction is the sign of the noisy bias
    (the majority class as the releases see it). Post-processing of the release."""
    k = len(w) - 1
    u = w[:-1]
    norm2 = float(u @ u)
    factor = 0.0 if norm2 <= 0 else max(0.0, 1.0 - max(k - 2, 0) * variance / norm2)
    return np.append(factor * u, w[-1])


def ftrl_step(w: Vector, increments: list[Vector], eta: float) -> Vector:
    """The FTRL weights after the members' released prefix increments are added to the
    study's prefix sum: ``w - eta sum(increments)`` (``w = -eta P~`` before)."""
    with np.errstate(over="ignore", invalid="ignore"):
        moved = w - eta * np.sum(np.stack(increments), axis=0)
    if not np.all(np.isfinite(moved)):
        raise ModelNotFinite("an FTRL step would leave the float range; the weights keep "
                             "their last value")
    return np.asarray(moved, dtype=np.float64)


def ftrl_rows(X: NDArray[np.floating], centre: Vector | None, radius_x: float,
              clip: float, bias: float = 0.0) -> NDArray[np.float64]:
    """Rows as DP-FTRL uses them: ``Pi_C(Pi_M(x) - c)`` (no centre: ``Pi_C(Pi_M(x))``).
    With ``bias = f > 0`` the last (constant) feature is set to ``f C`` and the others are
    projected into the ball of ``C sqrt(1 - f^2)``: every row still lies in the ball of ``C``,
    and the intercept is learnt on a constant large enough to move the threshold."""
    rows = project_rows(X, radius_x)
    rows = project_rows(rows if centre is None else rows - centre, clip)
    if bias <= 0:
        return rows
    out = project_rows(rows, clip * float(np.sqrt(1 - bias**2)))
    out[:, -1] = bias * clip
    return out


class OnlineFTRL:
    """Private online active learner by DP-FTRL; state after ``__init__`` ends in ``_``.

    ``noise`` is the prefix-sum mechanism's release noise (:func:`~common.online.factor.
    factor_noise` or :func:`~common.online.tree.tree_noise`, as ``config.prefix``) and
    ``centre_noise`` the centring sum's (sensitivity ``M``); ``None`` for both gives the
    non-private learner (same code path)."""

    def __init__(self, config: FTRLConfig, rule: QueryRule | None = None,
                 noise: GradientNoise | None = None,
                 centre_noise: GradientNoise | None = None) -> None:
        self.config, self.rule, self.centre_noise = config, rule, centre_noise
        self.tree = prefix_sums(config.prefix, config.dim, config.block, noise)
        self.w_: Vector = np.zeros(config.dim)
        self.updates_ = self.seen_ = self.queried_ = 0
        self._leaf: Vector = np.zeros(config.dim)
        self._count = 0
        self.centre_: Vector | None = None if config.centre else np.zeros(config.dim)
        self._centre_sum: Vector = np.zeros(config.dim)

    @property
    def coef_(self) -> Vector:
        """The weights that predict: ``w_``, or with ``config.shrink`` its feature part
        shrunk by the public noise variance (:func:`shrink_features`)."""
        if not (self.config.shrink and self.tree.noise is not None and self.updates_):
            return self.w_
        var = self.tree.noise.scale ** 2 * self.tree.variance(self.updates_)
        return shrink_features(self.w_, self.config.eta ** 2 * var)

    def features(self, X: NDArray[np.floating]) -> NDArray[np.float64]:
        """Rows of ``X`` as the learner uses them: ``Pi_C(Pi_M(x) - c)``."""
        cfg = self.config
        return ftrl_rows(X, self.centre_, cfg.radius_x, cfg.clip, cfg.bias)

    def decision_function(self, X: NDArray[np.floating]) -> Vector:
        """Margins ``<w, features(x)>`` of rows of ``X`` (positive = class +1)."""
        return np.asarray(self.features(X) @ self.coef_, dtype=np.float64)

    def predict(self, X: NDArray[np.floating]) -> NDArray[np.int64]:
        """Labels in {-1, +1}."""
        return np.where(self.decision_function(X) >= 0, 1, -1).astype(np.int64)

    def step(self, x: NDArray[np.floating], label: Callable[[], int]) -> bool:
        """Process one streamed record; ask ``label()`` only if the rule fires. Returns that."""
        raw = np.asarray(x, dtype=np.float64)
        if raw.shape != (self.config.dim,):
            raise ValueError(f"record must have {self.config.dim} features, got {raw.shape}")
        self.seen_ += 1
        if self.centre_ is None:  # centring phase: the record enters the centre's sum only
            self._centre_sum = self._centre_sum + project_ball(raw, self.config.radius_x)
            if self.seen_ == self.config.centre:
                total = self._centre_sum
                noisy = total if self.centre_noise is None else self.centre_noise.release(total)
                self.centre_ = centre_from_release(noisy, self.config.centre)
            return False
        z = self.features(raw[None, :])[0]
        margin = float(self.w_ @ z)
        asked = True if self.rule is None else bernoulli(self.rule.probability(margin))
        if asked:
            self.queried_ += 1
            self._leaf = self._leaf + hinge_gradient(self.w_, z, label())
            self._count += 1
            if self._count == self.config.leaf:
                self.close_leaf()
        return asked

    def close_leaf(self) -> None:
        """Release the open leaf through the tree and move to the new FTRL weights."""
        prefix = self.tree.add(self._leaf)
        self.updates_ += 1
        self.w_ = ftrl_weights(prefix, self.config.eta)
        self._leaf, self._count = np.zeros(self.config.dim), 0
