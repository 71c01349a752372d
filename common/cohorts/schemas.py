"""Wire models of the cohort round endpoints (``/v1/studies/{id}/cohorts``)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from common.study.params import Delta, Epsilon

__all__ = ["CohortReleaseCreate", "CohortRoundPublic", "CohortsPublic", "CohortStatus"]

CohortStatus = Literal["not_started", "running", "done", "failed"]
Value = Annotated[int, Field(strict=True, ge=-(2**62), le=2**62)]


class CohortReleaseCreate(BaseModel):
    """A participant's noisy vector for one cohort round (drawn once; a retry re-sends it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    idempotency_key: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$",
                                 description="The same key and values on a retry.")
    config_version: int = Field(strict=True, ge=1, description="Config version it used.")
    epsilon: Epsilon = Field(description="The round's cost, as the signed config splits it.")
    delta: Delta = Field(default=Decimal(0), description="The round's delta: 0 except a DPM leaf "
                        "round with Gaussian leaf noise.")
    values: list[Value] = Field(min_length=1, max_length=1_000_000,
                                description="The noisy integer vector of the round's method; "
                                "each value must lie within its public poisoning bound (record "
                                "bound times one record's contribution plus the noise tail at "
                                "2^-40), else 422.")


class CohortRoundPublic(BaseModel):
    """One cohort round: who it waits for and who has sent."""

    number: int = Field(description="Round number, 1 to T.")
    status: Literal["open", "done", "failed"] = Field(
        description="failed: the round's releases could not be used (reason in detail); the "
        "next round starts from the last good state, or the run ends failed.")
    expected: list[str] = Field(description="Participants the round waits for.")
    sent: list[str] = Field(description="Participants whose noisy vector is stored.")
    detail: str | None = None
    created_at: datetime
    finished_at: datetime | None = None


class CohortsPublic(BaseModel):
    """A study's cohort run: the public state of the current round, or the final model."""

    study_id: str
    method: str
    rounds: int = Field(description="T, from the signed config.")
    status: CohortStatus
    round: int | None = Field(default=None, description="The open round's number (running).")
    state: dict[str, Any] | None = Field(
        default=None, description="Public state the open round starts from (k-means: centroids "
        "and last summed noisy counts), computed from released values only.")
    model: dict[str, Any] | None = Field(
        default=None, description="The released CohortModel when done (CohortModel.to_json).")
    marks: list[list[str]] | None = Field(
        default=None, description="When done, per cohort in model order, what makes it no "
        "finding (common.cohorts.marks): 'noise' (size within 2 sd of the public count noise), "
        "'unmoved' (the centre is its public start), 'corner' (every coordinate on a bound of "
        "the box); [] for a cohort with no mark.")
    history: list[CohortRoundPublic] = Field(default_factory=list)
