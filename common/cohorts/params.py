"""Public cohort parameters of a study (the ``cohorts`` section of the signed StudyConfig).

Optional: a study without the section has no cohort rounds, and its canonical JSON is
unchanged (the field is omitted when null). Every number here is public and signed; the
study's hash seed (``lsh.seed``) gives the k-means start, so no second seed is needed.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, model_validator

from common.budget import EPSILON_QUANTUM, PrivacyBudget, exact_decimal

__all__ = ["CohortParams", "COHORT_METHODS"]

COHORT_METHODS = ("kmeans",)
"""Methods that run today; ``dpm`` (the cohort tree) is reserved until its pure code lands."""


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


class CohortParams(BaseModel):
    """Private cohort rounds: the method and how each participant's epsilon is spent.

    The whole ``epsilon`` is spent by each participant over the ``rounds`` rounds (split
    evenly, each round between counts and sums by ``count_share``; see
    :func:`common.cohorts.plan.split_epsilon`), on top of the study's per-release cost.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["kmeans", "dpm"] = Field(
        default="kmeans", description="kmeans: federated DP k-means with fusion (DP-KCCM); "
        "dpm: the DPM cohort tree (reserved, refused until built).")
    k: int = Field(strict=True, ge=1, le=1000, description="Cohorts wanted after fusion.")
    over: int = Field(default=3, strict=True, ge=1, le=100,
                      description="Fusion factor: start from over * k centroids (1: no fusion).")
    rounds: int = Field(default=5, strict=True, ge=1, le=100, description="Lloyd rounds T.")
    epsilon: _Eps = Field(description="Each participant's epsilon over all T rounds (string).")
    count_share: _Eps = Field(default=Decimal("0.2"),
                              description="Share of each round's epsilon spent on the counts.")
    resolution_bits: int = Field(default=12, strict=True, ge=1, le=30,
                                 description="Fixed-point grid of the released sums.")
    prune: bool = Field(default=True, description="Drop centroids under the public count "
                        "floor before fusing (not in the paper; see docs/COHORTS.md).")

    @model_validator(mode="after")
    def _consistent(self) -> CohortParams:
        if self.method not in COHORT_METHODS:
            raise ValueError(f"cohort method {self.method!r} is not available yet; use "
                             f"{' or '.join(COHORT_METHODS)}")
        from common.cohorts.plan import split_epsilon

        split_epsilon(self.epsilon, self.rounds, self.count_share)
        return self

    def round_costs(self) -> tuple[PrivacyBudget, ...]:
        """What each round costs one participant (``eps_counts + eps_sums``); sums to epsilon."""
        from common.cohorts.plan import split_epsilon

        return tuple(PrivacyBudget(c + s)
                     for c, s in split_epsilon(self.epsilon, self.rounds, self.count_share))
