"""Signed cohort parameters of a study's aggregation (for ``StudyConfig``; issue 11, item 3).

``AggregationParams`` is meant to be a field of the signed ``common.config.StudyConfig``
(``aggregation: AggregationParams = AggregationParams()``), so the coordinator cannot change
the cohort size, tolerated dropouts or colluders at round time: every participant checks a
round's roster against ``cohort_size`` and sizes its noise share for ``h_min``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from common.noise.accounting import honest_minimum, min_survivors


class AggregationParams(BaseModel):
    """How the participants' releases are merged, and the trust assumption that sizes the
    noise (``common.noise.accounting``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["independent", "secure"] = Field(
        default="independent",
        description="`independent`: each participant adds a full discrete Laplace and "
        "uploads at any time. `secure`: rounds of secure aggregation; each adds a Pólya "
        "share sized for h_min and the coordinator learns only the sum.",
    )
    cohort_size: int | None = Field(
        default=None, strict=True, ge=1, le=10_000,
        description="Participants n in every round (secure: required, >= 2; the roster must "
        "have exactly this size). Independent: optional, used to choose the tables.",
    )
    max_dropouts: int = Field(
        default=0, strict=True, ge=0, le=10_000,
        description="Participants that may drop out of a round (secure only).",
    )
    max_colluders: int = Field(
        default=0, strict=True, ge=0, le=10_000,
        description="Participants that may collude with the coordinator (secure only).",
    )
    expected_records: int | None = Field(
        default=None, strict=True, ge=1, le=10**10,
        description="Administrator-declared expected records per participant (public, never "
        "measured); chooses the LSH tables and drives the noise warning.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> AggregationParams:
        if self.mode == "independent":
            if self.max_dropouts or self.max_colluders:
                raise ValueError("max_dropouts and max_colluders apply to secure mode only")
            return self
        if self.cohort_size is None or self.cohort_size < 2:
            raise ValueError("secure aggregation needs cohort_size >= 2")
        honest_minimum(self.cohort_size, self.max_dropouts, self.max_colluders)
        return self

    @property
    def h_min(self) -> int:
        """Shares each noise share is sized for: 1 (independent) or ``n - d - t``."""
        if self.mode == "independent" or self.cohort_size is None:
            return 1
        return honest_minimum(self.cohort_size, self.max_dropouts, self.max_colluders)

    @property
    def min_survivors(self) -> int:
        """Fewest participants a revealed sum may cover (secure): ``n - d``; 1 otherwise."""
        if self.mode == "independent" or self.cohort_size is None:
            return 1
        return min_survivors(self.cohort_size, self.max_dropouts, self.max_colluders)
