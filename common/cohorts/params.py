"""Public cohort parameters of a study (the ``cohorts`` section of the signed StudyConfig).

Optional: a study without the section has no cohort rounds, and its canonical JSON is
unchanged (the field is omitted when null). Every number here is public and signed; the
study's hash seed (``lsh.seed``) gives the k-means start, so no second seed is needed.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from common.budget import EPSILON_QUANTUM, PrivacyBudget, exact_decimal
from common.study.delta_floor import MAX_RELEASE_DELTA, MIN_DECLARED_N
from common.study.params import omit_at_defaults

__all__ = ["CohortParams", "COHORT_METHODS"]

COHORT_METHODS = ("kmeans", "dpm")
"""The methods a study may name."""


def _epsilon_in(value: object) -> Decimal:
    if isinstance(value, float):
        raise ValueError("epsilon must be a decimal string such as '1', not a float")
    try:
        return exact_decimal(value, EPSILON_QUANTUM, "epsilon")
    except TypeError as exc:
        raise ValueError(str(exc)) from exc


_Eps = Annotated[
    Decimal,
    BeforeValidator(_epsilon_in),
    PlainSerializer(lambda v: format(v.normalize(), "f"), return_type=str, when_used="json"),
]


_LATER_DEFAULTS = {"schedule": "even", "leaf_noise": "laplace", "declared_n": None,
                   "sum_noise": "laplace"}
"""Fields added after cohort sections were first signed: omitted from the JSON at their
defaults, so those signatures still verify."""


class CohortParams(BaseModel):
    """Private cohort rounds: the method and how each participant's epsilon is spent.

    The whole ``epsilon`` is spent by each participant over the ``rounds`` rounds (split
    by ``schedule``, each round between counts and sums by ``count_share``; see
    :func:`common.cohorts.plan.split_epsilon`), on top of the study's per-release cost.
    ``schedule``, ``leaf_noise``, ``sum_noise`` and ``declared_n`` are omitted from the
    canonical JSON at their defaults, so cohort sections signed before they existed keep
    their signatures.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["kmeans", "dpm"] = Field(
        default="kmeans", description="kmeans: federated DP k-means with fusion (DP-KCCM); "
        "dpm: the federated DPM cohort tree (one round per level, then the leaf round).")
    epsilon: _Eps = Field(description="Each participant's epsilon over all rounds (string).")
    count_share: _Eps = Field(default=Decimal("0.2"), description="kmeans: share of each "
                              "round's epsilon for the counts; dpm: of the leaf release's.")
    k: int | None = Field(default=None, strict=True, ge=1, le=1000,
                          description="kmeans (required): cohorts wanted after fusion.")
    over: int = Field(default=3, strict=True, ge=1, le=100, description="kmeans: start from "
                      "over * k centroids (1: no fusion).")
    rounds: int = Field(default=5, strict=True, ge=1, le=100,
                        description="kmeans: Lloyd rounds T.")
    schedule: Literal["even", "adaptive"] = Field(
        default="even", description="kmeans: epsilon per round, even or DP-KCCM's adaptive "
        "1:2:3 blocks (later rounds get more; fixed by rounds alone, see docs/COHORTS.md).")
    resolution_bits: int = Field(default=12, strict=True, ge=1, le=30,
                                 description="kmeans: fixed-point grid of the released sums.")
    prune: bool = Field(default=True, description="kmeans: drop centroids under the public "
                        "count floor before fusing (not in the paper; see docs/COHORTS.md).")
    depth: int = Field(default=5, strict=True, ge=1, le=12,
                       description="dpm: tree levels (at most 2**depth cohorts).")
    bins: int = Field(default=64, strict=True, ge=2, le=4096,
                      description="dpm: public intervals per feature over its bounds.")
    dims_per_node: int | None = Field(default=4, strict=True, ge=1, le=10_000, description=(
        "dpm: features histogrammed per node and level, chosen from the seed (the L1 "
        "sensitivity of a level); null: all."))
    leaf_share: _Eps = Field(default=Decimal("0.4"),
                             description="dpm: share of epsilon for the leaf release.")
    min_size: int = Field(default=10, strict=True, ge=0, le=10**9,
                          description="dpm: public minimum noisy size of each side of a split.")
    leaf_noise: Literal["laplace", "gaussian"] = Field(
        default="laplace", description="dpm: noise on the leaf histograms; gaussian: L2 "
        "sensitivity sqrt(d), charged as (epsilon, 1/(n sqrt n)) with declared_n.")
    sum_noise: Literal["laplace", "gaussian"] = Field(
        default="laplace", description="kmeans: noise on the per-cluster sums; gaussian: L2 "
        "sensitivity the box's half-diagonal (sqrt(d) in [-1, 1]^d), charged as (epsilon, "
        "1/(n sqrt n)) over all rounds with declared_n.")
    declared_n: int | None = Field(default=None, strict=True, ge=2, le=10**12, description=(
        "dpm with gaussian leaf noise or kmeans with gaussian sum noise (required there): "
        "the declared, public number of records of the whole study, which sets delta; "
        f"never counted from the data; at least {MIN_DECLARED_N} (delta <= "
        f"{MAX_RELEASE_DELTA}, common.study.delta_floor)."))

    @model_validator(mode="after")
    def _consistent(self) -> CohortParams:
        if self.declared_n is not None and self.declared_n < MIN_DECLARED_N:
            raise ValueError(
                f"declared_n {self.declared_n} is below {MIN_DECLARED_N}: the study's delta "
                f"1/(n sqrt n) would exceed the delta ceiling {MAX_RELEASE_DELTA} "
                "(common.study.delta_floor)")
        if self.method == "kmeans":
            if self.k is None:
                raise ValueError("method kmeans needs k (the number of cohorts)")
            if self.leaf_noise != "laplace":
                raise ValueError("leaf_noise applies to method dpm only")
            if (self.sum_noise == "gaussian") != (self.declared_n is not None):
                raise ValueError("declared_n is required with gaussian sum_noise, and only there")
            from common.cohorts.plan import split_delta, split_epsilon

            split_epsilon(self.epsilon, self.rounds, self.count_share, self.schedule)
            if self.declared_n is not None:
                split_delta(self.declared_n, self.rounds)
        else:
            if self.schedule != "even" or self.sum_noise != "laplace":
                raise ValueError("schedule and sum_noise apply to method kmeans only")
            import numpy as np

            from common.cohorts.dpm_plan import DPMPlan

            DPMPlan(np.zeros(1), np.ones(1), self.epsilon, depth=self.depth, bins=self.bins,
                    dims_per_node=1, leaf_share=self.leaf_share,
                    count_share=self.count_share, min_size=self.min_size,
                    leaf_noise=self.leaf_noise, declared_n=self.declared_n)
        return self

    @model_serializer(mode="wrap")
    def _omit_later_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        return omit_at_defaults(handler(self), _LATER_DEFAULTS)

    def cap(self) -> PrivacyBudget:
        """What a participant may spend on the cohort rounds in all: ``epsilon`` and, with
        Gaussian noise, the study's delta ``1 / (n sqrt n)`` for ``declared_n`` (the k-means
        rounds split it, the DPM leaf round takes it whole); 0 otherwise."""
        if self.declared_n is None:
            return PrivacyBudget(self.epsilon)
        from common.noise.gaussian import declared_delta

        return PrivacyBudget(self.epsilon, declared_delta(self.declared_n))

    def describe(self) -> str:
        """One line for people: the method and its shape."""
        if self.method == "kmeans":
            return (f"k-means with fusion: k {self.k}, {self.over * (self.k or 0)} starting "
                    f"centroids, {self.rounds} rounds, {self.schedule} epsilon per round, "
                    f"{self.sum_noise} sums"
                    + (f" (declared n {self.declared_n})" if self.declared_n else ""))
        return (f"DPM tree: depth {self.depth}, {self.bins} intervals per feature, "
                f"{self.dims_per_node or 'all'} features per node, {self.leaf_noise} leaf "
                "histograms" + (f" (declared n {self.declared_n})" if self.declared_n else ""))
