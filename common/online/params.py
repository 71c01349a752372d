"""The online section of a signed study config: public streaming parameters and their charge.

Everything here is public (it is signed by the coordinator and read by every participant): the
learner (``algorithm``: DP-FTRL, :mod:`common.online.ftrl`, with its clip radius, step, bias
feature, leaf, prefix-sum mechanism and its size; or FLMB, the per-batch-noise SGD of Ghassemi,
Sarwate & Wright, AISec 2016, with its weight ball, step schedule and batching), the record ball
``M = radius_x``, the query rule and the privacy parameters. With DP-FTRL the "gradient release"
below is the prefix-sum mechanism's releases, calibrated so that a whole block costs
``(epsilon_gradient, delta_gradient)`` per record (:mod:`common.online.factor`,
:mod:`common.online.tree`).

**Neighbouring streams and the charge.** Two streams are neighbours when they differ in one
*slot*: it holds an arriving record in one and the empty record in the other (the zero
vector, which is queried like any record and adds a zero gradient): the system's unit, one
record added or removed (DESIGN.md), with "removed" keeping its slot. So one slot moves a
gradient sum by at most ``C`` (``M`` for FLMB and the centring sum), the sensitivity every
online noise is set for; a record *replaced* by another is two such slots (twice the
sensitivity, four times the zCDP), as for the histograms. Under
the ``"labels"`` scheme batch boundaries are fixed by the sequence of query decisions; under
``"records"`` by slot positions. Both are identical in neighbouring streams once the
differing slot's query decision is equal, and that decision is ``epsilon_select``-DP; so the
differing record costs its decision plus one gradient release, and everything else is adaptive
post-processing: ``(epsilon_select + epsilon_gradient, delta_gradient)`` per slot (parallel
composition across slots, :mod:`common.online.accounting`).

Plain add/remove *without* a slot is **not** covered at that price: adding one labelled record
shifts every later ``"labels"`` batch by one record, so each later batch differs in two
records and the cost grows with the number of later batches. We do not claim it.

**The public schedule.** The ledger charges that per-slot cost once per *window* of the
signed schedule: calendar windows of ``window_seconds`` seconds from ``window_origin`` (Unix
time), each holding ``window_slots`` slots. A window's charge is reserved before its first
query decision; when the window ends, the stream pads its unused slots with empty records and
makes exactly one release (all the window's queried slots as one batch; unanswered queries add
a zero gradient). So the number, order and times of releases and the claimed charges are
functions of the schedule alone, and the one count the coordinator sees (queried slots) is a
function of the private query decisions. Records beyond a window's slots are scored but never
used for learning. One window is what the per-slot guarantee needs; charging every window
again makes the ledger total bound a person with at most one record per window (basic
composition) and lets a cap stop a stream. Epsilon is computed in floats (the exponential
rule's true epsilon) and rounded *up* to the ledger quantum, so the charge is stored exactly
and is never below the truth.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    model_serializer,
    model_validator,
)

from common.budget import DELTA_QUANTUM, EPSILON_QUANTUM, PrivacyBudget, decimal_field
from common.online.ftrl import FTRLConfig, ftrl_rows
from common.online.learner import OnlineConfig, centred_rows
from common.online.noise import online_factor_noise, online_noise, online_tree_noise
from common.online.query import ExponentialRule, QueryRule, RandomizedResponseRule
from common.study.canonical import is_canonical
from common.study.delta_floor import check_delta
from common.study.params import omit_at_defaults

if TYPE_CHECKING:  # OpenDP takes about a second to import: only where noise is needed
    from common.noise.gradient import GradientNoise

__all__ = ["SIGNED_AT", "OnlineParams", "to_ball"]

SIGNED_AT = {"centre_window": None, "algorithm": "ftrl", "clip": 0.5, "eta": 0.01,
             "bias": 0.25, "leaf": 10, "tree_leaves": 64, "prefix": "sqrt", "horizon": 256}
"""The values these keys had when they were added: the canonical form leaves a key out at its
value here, so configs signed before it keep their bytes (configs signed before DP-FTRL are
read as DP-FTRL), and a parse of canonical bytes (``common.study.canonical.parse_canonical``) reads
a missing key as its value here, **not** as the field's default. So a field's default may move
without changing the meaning of a study signed before (a new value differs from the one here
and is written out); never change a value here. Today every default equals its value here."""


def _exact(quantum: Decimal, name: str) -> BeforeValidator:
    return BeforeValidator(lambda value: decimal_field(value, quantum, name))


_AS_TEXT = PlainSerializer(lambda d: f"{d.normalize():f}", return_type=str, when_used="json")
_Eps = Annotated[Decimal, _exact(EPSILON_QUANTUM, "epsilon"), _AS_TEXT]
_Delta = Annotated[Decimal, _exact(DELTA_QUANTUM, "delta"), _AS_TEXT]
_Pos = Annotated[float, Field(strict=False, gt=0, allow_inf_nan=False)]


class OnlineParams(BaseModel):
    """Public parameters of streaming mode (``fedod-participant stream``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dim: int = Field(ge=2, description="Learner dimension: the number of features + 1 (bias).")
    radius_x: _Pos = Field(default=1.0, description="M: records are projected into this ball.")
    radius_w: _Pos = Field(default=100.0, description="R: the query rule's margin bound is R x "
                           "clip (FTRL) or R x radius_x (FLMB, whose weights are projected "
                           "into this ball).")
    lam: float = Field(default=1e-3, ge=0, allow_inf_nan=False,
                       description="FLMB: L2 regulariser.")
    eta0: _Pos = Field(default=10.0, description="FLMB: step size eta_t = eta0 / sqrt(t).")
    batch: int = Field(default=250, ge=1, le=100_000, description="Mini-batch size of the "
                       "pure learner and the benchmarks (large batches shrink the noise per "
                       "labelled record; BENCHMARKS.md); a stream's batch is a schedule "
                       "window's queried slots.")
    scheme: Literal["records", "labels"] = Field(
        default="labels", description="Pure learner: close a batch after `batch` labels or "
        "`batch` records (a stream closes one per schedule window).")
    query: Literal["exponential", "randomized_response"] = Field(
        default="exponential", description="Private query rule (common.online.query).")
    p: float = Field(default=0.09, gt=0, lt=1, description="Exponential rule: top query "
                     "probability; randomized response: ignored (set by epsilon_select).")
    tau: float = Field(default=0.1, ge=0, allow_inf_nan=False,
                       description="Randomized response: margin threshold of 'near'.")
    epsilon_select: _Eps = Field(default=Decimal(1), description="Target epsilon of one "
                                 "query decision; the charge uses the rule's true epsilon.")
    epsilon_gradient: _Eps = Field(default=Decimal(1), description="Epsilon of one noisy "
                                   "mini-batch gradient sum (OpenDP Gaussian).")
    delta_gradient: _Delta = Field(default=Decimal("0.000001"),
                                   description="Delta of one noisy gradient sum.")
    window_slots: int = Field(default=10_000, ge=1, le=10_000_000, description="Slots per "
                              "schedule window: one charge and one release per window; unused "
                              "slots are padded with empty records, records beyond them are "
                              "scored but not learnt from.")
    window_seconds: int = Field(default=86_400, ge=1, description="Length of a schedule window "
                                "(calendar time; 86400: one UTC day).")
    window_origin: int = Field(default=0, description="Unix time at which window 0 begins.")
    average: bool = Field(default=True, description="FLMB: score and query with the running "
                          "mean of the iterates (post-processing of the released steps); "
                          "FTRL serves its weights as the average.")
    step_releases: int = Field(default=1, ge=1, le=1000, description="Coordinator: noisy "
                               "batch sums summed into one SGD step.")
    algorithm: Literal["ftrl", "flmb"] = Field(
        default="ftrl", description="Private learner: 'ftrl' (DP-FTRL, tree aggregation noise, "
        "weights updated every `leaf` labels; docs/ONLINE.md) or 'flmb' (the per-batch-noise "
        "mini-batch SGD of Ghassemi et al., the baseline).")
    clip: _Pos = Field(default=0.5, description="FTRL: C, centred records are projected into "
                       "this ball (gradient sensitivity C: one slot's record against the empty "
                       "record).")
    eta: _Pos = Field(default=0.01, description="FTRL: weights = Pi_R(-eta x noisy prefix sum "
                      "of the gradients).")
    bias: float = Field(default=0.25, ge=0, lt=1, description="FTRL: the constant (last) "
                        "feature as a fraction of `clip`, the other features projected so that "
                        "the record stays in the ball of `clip`; 0: the record's own.")
    leaf: int = Field(default=10, ge=1, le=100_000, description="FTRL, pure learner: labels "
                      "per tree leaf (an update every `leaf` labels); a stream's leaf is a "
                      "schedule window's queried slots.")
    tree_leaves: int = Field(default=64, ge=1, le=2**20, description="FTRL: leaves per tree "
                             "(a power of two; a leaf is in log2 + 1 noisy nodes); a new tree "
                             "starts on the full one's noisy total.")
    prefix: Literal["sqrt", "tree"] = Field(
        default="sqrt", description="FTRL: prefix-sum noise, 'sqrt' (square-root matrix "
        "factorisation, common/online/factor.py; less noise in the early prefix sums) or "
        "'tree' (tree aggregation, `tree_leaves`).")
    horizon: int = Field(default=256, ge=1, le=4096, description="FTRL, 'sqrt': leaves per "
                         "factorisation block (sensitivity grows like sqrt(log horizon)); a "
                         "new block starts on the full one's noisy total.")
    centre_window: int | None = Field(
        default=None, ge=0, description="Centring (docs/ONLINE.md): this schedule window's "
        "release is the noisy sum of its slots' records (none queried, unused slots empty), "
        "and every later record is centred on the served centre; learning starts after it. "
        "None: no centring.")

    @model_validator(mode="before")
    @classmethod
    def _signed_form(cls, data: object, info: ValidationInfo) -> object:
        if isinstance(data, dict) and "epoch_records" in data:  # configs signed before 0009
            data = {k: v for k, v in data.items() if k != "epoch_records"} | {
                "window_slots": data["epoch_records"]}
        if isinstance(data, dict) and is_canonical(info.context):
            data = SIGNED_AT | data  # a key the canonical form left out: its signed value
        return data

    @model_validator(mode="after")
    def _private(self) -> OnlineParams:
        if self.epsilon_select <= 0 or self.epsilon_gradient <= 0:
            raise ValueError("epsilon_select and epsilon_gradient must be > 0")
        if not Decimal(0) < self.delta_gradient:
            raise ValueError("delta_gradient must be > 0; use about 1e-6")
        check_delta(self.delta_gradient, "delta_gradient")
        if self.tree_leaves & (self.tree_leaves - 1):
            raise ValueError(f"tree_leaves must be a power of two, got {self.tree_leaves}")
        return self

    @model_serializer(mode="wrap")
    def _canonical_form(self, handler: SerializerFunctionWrapHandler,
                        info: SerializationInfo) -> Any:
        """The canonical form leaves out the keys at their :data:`SIGNED_AT` values, so
        configs signed before them keep their bytes (their signatures still verify); every
        other dump is complete (parsed without the canonical context, a missing key is the
        field's default)."""
        doc = handler(self)
        return omit_at_defaults(doc, SIGNED_AT) if is_canonical(info.context) else doc

    def learner(self) -> OnlineConfig:
        """The pure learner's configuration."""
        return OnlineConfig(self.dim, self.radius_x, self.radius_w, self.lam, self.eta0,
                            self.batch, self.scheme, self.average)

    def ftrl(self, centre: int = 0) -> FTRLConfig:
        """The pure DP-FTRL learner's configuration (``centre``: centring records, 0: none)."""
        return FTRLConfig(self.dim, self.radius_x, self.clip, self.eta, self.radius_w,
                          self.leaf, self.tree_leaves, centre, self.bias, self.prefix,
                          self.horizon)

    @property
    def block(self) -> int:
        """FTRL: leaves per block of the prefix-sum mechanism (tree or square-root block)."""
        return self.horizon if self.prefix == "sqrt" else self.tree_leaves

    def rows(self, X: NDArray[np.floating], centre: NDArray[np.float64] | None
             ) -> NDArray[np.float64]:
        """Records in the ball of ``M`` as the learner uses them (score, query, gradient):
        centred once a centre is served, then, for FTRL, projected into the ball of ``clip``."""
        if self.algorithm == "ftrl":
            return ftrl_rows(X, centre, self.radius_x, self.clip, self.bias)
        return centred_rows(X, centre, self.radius_x)

    def rule(self) -> QueryRule:
        """The query rule whose *true* epsilon is at most ``epsilon_select``."""
        eps = float(self.epsilon_select)
        if self.query == "randomized_response":
            return RandomizedResponseRule.for_epsilon(eps, self.tau)
        bound = self.radius_w * (self.clip if self.algorithm == "ftrl" else self.radius_x)
        return ExponentialRule.for_epsilon(self.p, bound, eps)

    def noise(self) -> GradientNoise:
        """The gradient noise: FTRL's square-root releases (sensitivity ``C |C|_col``) or
        tree nodes (``C`` in ``log2(tree_leaves) + 1`` nodes), or FLMB's batch sums
        (``M``); scale computed once."""
        eps, delta = float(self.epsilon_gradient), float(self.delta_gradient)
        if self.algorithm == "ftrl" and self.prefix == "sqrt":
            return online_factor_noise(self.clip, eps, delta, self.horizon)
        if self.algorithm == "ftrl":
            return online_tree_noise(self.clip, eps, delta, self.tree_leaves)
        return online_noise(self.radius_x, eps, delta)

    def centre_noise(self) -> GradientNoise:
        """Noise of the centring sum (records in the ball of ``M``: sensitivity ``M``)."""
        return online_noise(self.radius_x, float(self.epsilon_gradient),
                            float(self.delta_gradient))

    def window_at(self, unix_time: float) -> int:
        """Index of the schedule window that holds ``unix_time``."""
        return math.floor((unix_time - self.window_origin) / self.window_seconds)

    def window_end(self, window: int) -> int:
        """Unix time at which ``window`` ends (its release is due)."""
        return self.window_origin + (window + 1) * self.window_seconds

    def is_centre(self, window: int) -> bool:
        """Whether ``window`` is the centring window (its release is a centring sum)."""
        return self.centre_window is not None and window == self.centre_window

    def before_centre(self, window: int) -> bool:
        """Whether ``window`` comes before the centring window: outside the schedule (records
        scored only; nothing charged or released)."""
        return self.centre_window is not None and window < self.centre_window

    def epoch_cost(self) -> PrivacyBudget:
        """What one schedule window is charged: true selection epsilon + one gradient release
        (the per-slot cost, :mod:`common.online.accounting`)."""
        from common.online.accounting import record_cost

        return record_cost(self.rule(), self.noise())


def to_ball(X: NDArray[np.floating], lo: NDArray[np.floating], hi: NDArray[np.floating],
            radius: float = 1.0) -> NDArray[np.float64]:
    """Map features to ``[-1, 1]`` with the *public* bounds, append a bias feature 1, and
    scale by ``radius / sqrt(d + 1)``: every row then lies in the ball of ``radius`` without
    any data-derived statistic (values beyond the bounds are clipped first)."""
    rows = np.atleast_2d(np.asarray(X, dtype=np.float64))
    low, high = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    span = np.where(high > low, high - low, 1.0)
    Z = np.hstack([2 * (np.clip(rows, low, high) - low) / span - 1, np.ones((len(rows), 1))])
    return np.asarray(Z * (radius / math.sqrt(Z.shape[1])), dtype=np.float64)
