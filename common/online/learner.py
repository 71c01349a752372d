"""Online linear SVM by projected SGD with private query rules and mini-batches.

Ghassemi, Sarwate & Wright (AISec 2016), after Song, Chaudhuri & Sarwate, "Stochastic
gradient descent with differentially private updates" (GlobalSIP 2013). Each record ``x`` is
first projected into the l2 ball of radius ``M``; its margin ``<w, x>`` is scored; a query
rule decides (privately) whether the reviewer labels it; labelled records' hinge-loss
gradients are summed into a mini-batch, and the batch is released with noise and applied:

    w <- Pi_R( w - eta_t * (lambda * w + (sum_i g_i + Z) / n) ),   eta_t = eta0 / sqrt(t),

with ``n`` the batch's number of labelled records (post-processing of the private query
decisions), ``Pi_R`` the projection onto the ball of radius ``R`` and ``t`` the update count.

Centring (``centre = K > 0``, not in the paper): the first ``K`` records are never queried;
their projected sum is released once with the same noise as a gradient sum (one slot's record
against the empty record moves it by at most ``M``), and from then on every record is used as
``Pi_M(Pi_M(x) - c)``, with ``c`` the released mean (bias coordinate set to 0: the last
feature is the constant bias). Without it the first steps' direction ``sum y x`` carries the
records' common component (blank pixels) weighted by the batch's class imbalance, which moves
every margin alike.
Two batching schemes: ``"records"`` closes a batch after every ``batch`` records seen (a batch
may then hold 0 labels: nothing is released, no step), ``"labels"`` after every ``batch``
labelled records. ``noise=None`` gives the non-private online learner (same code path).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
from numpy.typing import NDArray

from common.errors import ModelNotFinite
from common.online.query import QueryRule, bernoulli

if TYPE_CHECKING:  # OpenDP (behind the noise) takes about a second to import
    from common.noise.gradient import GradientNoise

__all__ = [
    "OnlineConfig",
    "OnlineSVM",
    "apply_step",
    "centre_from_release",
    "centred_rows",
    "federated_step",
    "hinge_gradient",
    "project_ball",
    "project_rows",
    "running_mean",
    "safe_norm",
    "step_size",
]

Vector = NDArray[np.float64]


_SMALLEST_NORMAL = float(np.finfo(np.float64).tiny)
_PLAIN = (1e-150, 1e150)
"""Norms in this range are computed plainly (their squares are normal floats); outside it the
vector is scaled by its largest magnitude first, so squares neither overflow nor lose digits
in the subnormal range."""


def safe_norm(v: NDArray[np.floating]) -> float:
    """The l2 norm of ``v``, accurate for any finite entries whose norm is a float (scaled by
    the largest magnitude when the plain norm's squares would overflow or underflow); ``inf``
    or ``nan`` only for a non-finite entry or a norm past the float range."""
    vec = np.asarray(v, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):  # handled below
        norm = float(np.linalg.norm(vec))
    if vec.size == 0 or _PLAIN[0] < norm < _PLAIN[1]:
        return norm
    top = float(np.max(np.abs(vec)))
    if not math.isfinite(top) or top == 0.0:
        return top
    return top * float(np.linalg.norm(vec / top))


def project_ball(v: Vector, radius: float) -> Vector:
    """Euclidean projection of ``v`` onto the l2 ball of ``radius`` (scale down if outside).

    Finite ``v`` always gives a finite result inside the ball, also when its norm overflows a
    float or its squares are subnormal (scaled by its largest magnitude first); a non-finite
    entry raises :class:`~common.errors.ModelNotFinite`."""
    norm = safe_norm(v)
    if norm <= radius:
        return v
    if _PLAIN[0] < norm < _PLAIN[1]:
        factor = radius / norm
        return v * factor if factor >= _SMALLEST_NORMAL else (v / norm) * radius
    top = float(np.max(np.abs(v)))
    if not math.isfinite(top):
        raise ModelNotFinite("cannot project a vector with a non-finite value", norm=norm)
    unit = v / top
    return unit * (radius / float(np.linalg.norm(unit)))


def project_rows(X: NDArray[np.floating], radius: float) -> NDArray[np.float64]:
    """:func:`project_ball` applied to every row of ``X`` (for scoring many records)."""
    rows = np.atleast_2d(np.asarray(X, dtype=np.float64))
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return np.where(norms > radius, rows * (radius / np.maximum(norms, radius)), rows)


def centre_from_release(noisy_sum: Vector, count: int) -> Vector:
    """The centre from a released noisy sum of ``count`` projected records: their noisy mean
    with the last (bias) coordinate set to 0, so centred records keep their constant bias
    feature. Post-processing of the release; ``count`` is public (the config's ``centre``)."""
    if count < 1:
        raise ValueError(f"a centre needs at least one record, got {count}")
    centre = np.asarray(noisy_sum, dtype=np.float64) / count
    centre[-1] = 0.0
    if not np.all(np.isfinite(centre)):
        raise ModelNotFinite("the centre would hold a non-finite value")
    return centre


def centred_rows(X: NDArray[np.floating], centre: Vector | None,
                 radius: float) -> NDArray[np.float64]:
    """Rows of ``X`` as a centring learner uses them: ``Pi_M(x)``, then ``Pi_M(Pi_M(x) - c)``
    once a centre ``c`` is released (``None``: no centre yet, rows only projected). The
    second projection keeps every centred record in the ball, so gradients keep their
    ``M`` sensitivity whatever the (noisy) centre."""
    rows = project_rows(X, radius)
    return rows if centre is None else project_rows(rows - centre, radius)


def step_size(t: int, eta0: float) -> float:
    """``eta0 / sqrt(t)`` for update number ``t >= 1``."""
    if t < 1:
        raise ValueError(f"update number must be >= 1, got {t}")
    return eta0 / math.sqrt(t)


def hinge_gradient(w: Vector, x: Vector, y: int) -> Vector:
    """Subgradient of ``max(0, 1 - y <w, x>)`` in ``w``: ``-y x`` inside the margin, else 0."""
    if y not in (-1, 1):
        raise ValueError(f"label must be -1 or +1, got {y}")
    return -float(y) * x if y * float(w @ x) < 1.0 else np.zeros_like(x)


@dataclass(frozen=True)
class OnlineConfig:
    """Public hyperparameters of the online learner (they go in the signed study config)."""

    dim: int
    radius_x: float = 1.0
    radius_w: float = 10.0
    lam: float = 1e-3
    eta0: float = 1.0
    batch: int = 1
    scheme: Literal["records", "labels"] = "labels"
    average: bool = False
    """Predict with the running mean of the iterates after each step (Polyak averaging):
    post-processing of the released steps, so free; it damps the gradient noise."""
    centre: int = 0
    """Records (never queried) whose noisy mean centres every later record; 0: no centring."""

    def __post_init__(self) -> None:
        if self.dim < 1 or self.batch < 1 or self.centre < 0:
            raise ValueError("dim and batch must be >= 1, centre >= 0")
        if not (self.radius_x > 0 and self.radius_w > 0 and self.lam >= 0 and self.eta0 > 0):
            raise ValueError("radii and eta0 must be > 0 and lam >= 0")
        if self.scheme not in ("records", "labels"):
            raise ValueError(f"scheme must be 'records' or 'labels', got {self.scheme!r}")

    @property
    def margin_bound(self) -> float:
        """Public bound ``R * M`` on ``|<w, x>|``, for the exponential query rule."""
        return self.radius_w * self.radius_x


def apply_step(w: Vector, t: int, noisy_sum: Vector, count: int, config: OnlineConfig) -> Vector:
    """One projected SGD step from a released (noisy) batch sum of ``count`` gradients.

    Pure post-processing of the release: this is what a coordinator does with summed
    contributions in the federated version.
    """
    if count < 1:
        raise ValueError(f"a step needs at least one labelled record, got {count}")
    with np.errstate(over="ignore", invalid="ignore"):
        grad = config.lam * w + noisy_sum / count
        moved = w - step_size(t, config.eta0) * grad
    if not np.all(np.isfinite(moved)):
        raise ModelNotFinite(
            f"step {t} would leave the float range (a noisy sum of l2 norm "
            f"{safe_norm(noisy_sum):.6g} over {count} records); the weights keep their last "
            "value", step=t)
    return project_ball(moved, config.radius_w)


def running_mean(mean: Vector, w: Vector, t: int) -> Vector:
    """Mean of the iterates ``w_1..w_t`` from the mean of ``w_1..w_{t-1}``; both lie in the
    weight ball, so the result is finite (a convex combination of the two)."""
    return mean + (w - mean) / t


def federated_step(
    w: Vector, t: int, sums: list[Vector], counts: list[int], config: OnlineConfig
) -> Vector:
    """Step ``t`` from several participants' released batches: their noisy sums and labelled
    counts are added and :func:`apply_step` takes one step (the mean noisy gradient over all
    their labelled records). Post-processing of the releases only."""
    if not sums or len(sums) != len(counts):
        raise ValueError("need one count per noisy sum, and at least one of each")
    with np.errstate(over="ignore"):  # an overflow is refused by apply_step, never stored
        total = np.sum(np.stack(sums), axis=0)
    return apply_step(w, t, total, int(sum(counts)), config)


class OnlineSVM:
    """Private online active learner; state after ``__init__`` ends in ``_``."""

    def __init__(
        self,
        config: OnlineConfig,
        rule: QueryRule | None = None,
        noise: GradientNoise | None = None,
    ) -> None:
        self.config = config
        self.rule = rule
        self.noise = noise
        self.w_: Vector = np.zeros(config.dim)
        self.w_avg_: Vector = np.zeros(config.dim)
        self.updates_ = 0
        self.seen_ = 0
        self.queried_ = 0
        self._sum: Vector = np.zeros(config.dim)
        self._count = 0
        self._since_update = 0
        self.centre_: Vector | None = None if config.centre else np.zeros(config.dim)
        self._centre_sum: Vector = np.zeros(config.dim)
        self._centre_seen = 0

    @property
    def coef_(self) -> Vector:
        """The weights that score: the iterate average with ``config.average``, else ``w_``."""
        return self.w_avg_ if self.config.average else self.w_

    def features(self, X: NDArray[np.floating]) -> NDArray[np.float64]:
        """Rows of ``X`` as the learner uses them: ``Pi_M(x)``, then centred and projected
        again once a centre is released (before that the weights are 0 anyway)."""
        centre = self.centre_ if self.config.centre else None
        return centred_rows(X, centre, self.config.radius_x)

    def decision_function(self, X: NDArray[np.floating]) -> Vector:
        """Margins ``<coef_, features(x)>`` of rows of ``X`` (positive = class +1)."""
        return np.asarray(self.features(X) @ self.coef_, dtype=np.float64)

    def predict(self, X: NDArray[np.floating]) -> NDArray[np.int64]:
        """Labels in {-1, +1}."""
        return np.where(self.decision_function(X) >= 0, 1, -1).astype(np.int64)

    def step(self, x: NDArray[np.floating], label: Callable[[], int]) -> bool:
        """Process one streamed record; ask ``label()`` only if the rule fires. Returns that."""
        xp = project_ball(np.asarray(x, dtype=np.float64), self.config.radius_x)
        if xp.shape != (self.config.dim,):
            raise ValueError(f"record must have {self.config.dim} features, got {xp.shape}")
        if self.centre_ is None:  # centring phase: the record enters the centre's sum only
            self.seen_ += 1
            self._centre_sum = self._centre_sum + xp
            self._centre_seen += 1
            if self._centre_seen == self.config.centre:
                self.release_centre()
            return False
        if self.config.centre:
            xp = project_ball(xp - self.centre_, self.config.radius_x)
        margin = float(self.coef_ @ xp)
        asked = True if self.rule is None else bernoulli(self.rule.probability(margin))
        self.seen_ += 1
        self._since_update += 1
        if asked:
            self.queried_ += 1
            self._sum = self._sum + hinge_gradient(self.w_, xp, label())
            self._count += 1
        full = self._since_update if self.config.scheme == "records" else self._count
        if full >= self.config.batch:
            self.flush()
        return asked

    def release_centre(self) -> None:
        """Release the centring records' sum (noisy, sensitivity ``M``) and fix the centre."""
        total = self._centre_sum
        noisy = total if self.noise is None else self.noise.release(total)
        self.centre_ = centre_from_release(noisy, self.config.centre)

    def flush(self) -> None:
        """Release the pending batch (if it holds a label) and take the step."""
        if self._count:
            noisy = self._sum if self.noise is None else self.noise.release(self._sum)
            self.updates_ += 1
            self.w_ = apply_step(self.w_, self.updates_, noisy, self._count, self.config)
            self.w_avg_ = running_mean(self.w_avg_, self.w_, self.updates_)
        self._sum = np.zeros(self.config.dim)
        self._count = 0
        self._since_update = 0
