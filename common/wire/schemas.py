"""Wire models of the coordinator's REST API (``/v1``), shared with the participant.

Inputs (``*Create``, ``MemberAdd``, ``ParticipantUpdate``) forbid unknown fields; epsilon and
delta travel as decimal strings (never floats, see :mod:`common.budget`); counts travel as
:class:`~common.wire.encoding.EncodedCounts`.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from common.cohorts.params import CohortParams
from common.online.params import OnlineParams
from common.secagg.params import AggregationParams
from common.study.params import (
    MAX_DELTA,
    Delta,
    Epsilon,
    FeatureSpec,
    GridParams,
    NTables,
    PrivacyParams,
    SampleSize,
    StudyId,
)
from common.study.signing import SignedConfig
from common.wire.encoding import EncodedCounts

__all__ = [
    "Name",
    "LSHCreate",
    "StudyCreate",
    "StudyPublic",
    "ParticipantCreate",
    "ParticipantCreated",
    "ParticipantPublic",
    "ParticipantUpdate",
    "MemberAdd",
    "ContributionCreate",
    "ContributionPublic",
    "ModelPublic",
    "LedgerEntryPublic",
    "BudgetPublic",
    "KeyPublic",
]

Name = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description="Participant name: letters, digits, `_.-`, at most 64 characters.",
    ),
]
IdempotencyKey = Annotated[
    str,
    Field(
        min_length=16,
        max_length=128,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="Client-chosen key, the same for every retry of one release.",
    ),
]
Hex64 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Output(BaseModel):
    model_config = ConfigDict(frozen=True)


class LSHCreate(_Input):
    """LSH parameters an administrator chooses; the seed and digest are drawn by the server."""

    n_tables: NTables = 100
    sample_size: SampleSize = 16
    scoring: Literal["log", "mass"] | None = Field(
        default=None, description="LSHiTables cell scoring; null lets the detector choose."
    )


class StudyCreate(_Input):
    """A new study: schema with public bounds, detectors and per-release privacy cost."""

    study_id: StudyId = Field(description="Study identifier (letters, digits, `_.-`).")
    features: list[FeatureSpec] = Field(
        min_length=1, max_length=10_000, description="Schema with public bounds, in order."
    )
    lsh: LSHCreate = Field(default_factory=LSHCreate, description="LSH iTables parameters.")
    grid: GridParams | None = Field(default=None, description="Grid k-NN release, or null.")
    privacy: PrivacyParams = Field(description="Epsilon (and delta) spent by each release.")
    valid_days: int = Field(
        default=365, strict=True, ge=1, le=3650, description="Days until the config expires."
    )
    aggregation: AggregationParams | None = Field(
        default=None,
        description="independent (default) or secure aggregation with its signed cohort "
        "parameters (n, dropouts, colluders, hence h_min).",
    )
    online: OnlineParams | None = Field(
        default=None,
        description="Streaming mode (DP online active learning, docs/ONLINE.md), or null.",
    )
    cohorts: CohortParams | None = Field(
        default=None, description="Private cohort rounds (k-means with fusion), or null."
    )


class StudyPublic(_Output):
    """A study as the coordinator reports it."""

    study_id: StudyId
    version: int = Field(description="Current config version.")
    contributors: int = Field(description="Number of contributions merged into the model.")
    model_version: int = Field(description="Version of the merged model (0 before any).")
    config: SignedConfig = Field(description="The signed config participants verify.")


class ParticipantCreate(_Input):
    """Enrol a participant with its lifetime privacy budget cap."""

    name: Name
    epsilon_cap: Epsilon = Field(description="Total epsilon the participant may spend.")
    delta_cap: Delta = Field(default=Decimal(0), description="Total delta it may spend.")

    @model_validator(mode="after")
    def _sane_delta(self) -> ParticipantCreate:
        if self.delta_cap >= MAX_DELTA:
            raise ValueError(f"delta_cap must be < {MAX_DELTA}")
        return self


class ParticipantCreated(_Output):
    """Returned once at enrolment: the bearer token is not stored in clear and not shown again."""

    name: Name
    token: str = Field(description="Bearer token; store it now, it is shown only once.")


class ParticipantPublic(_Output):
    """A participant without secrets."""

    name: Name
    active: bool = Field(description="False once revoked.")
    epsilon_cap: Epsilon
    delta_cap: Delta
    created_at: datetime


class ParticipantUpdate(_Input):
    """Change a participant's caps; a cap below what it has already spent is refused (409)."""

    epsilon_cap: Epsilon | None = Field(default=None, description="New epsilon cap.")
    delta_cap: Delta | None = Field(default=None, description="New delta cap.")

    @model_validator(mode="after")
    def _sane_delta(self) -> ParticipantUpdate:
        if self.delta_cap is not None and self.delta_cap >= MAX_DELTA:
            raise ValueError(f"delta_cap must be < {MAX_DELTA}")
        return self


class MemberAdd(_Input):
    """Add an enrolled participant to a study."""

    participant: Name


class ContributionCreate(_Input):
    """One release of a participant: noisy counts and the privacy cost it claims."""

    idempotency_key: IdempotencyKey
    config_version: int = Field(strict=True, ge=1, description="Config version released under.")
    config_digest: Hex64 = Field(description="SignedConfig.digest() of that config.")
    epsilon: Epsilon = Field(description="Epsilon claimed; must equal the config's cost.")
    delta: Delta = Field(default=Decimal(0), description="Delta claimed (sparse grid only).")
    lsh: EncodedCounts = Field(description="Noisy LSH iTables histogram, dense.")
    grid: EncodedCounts | None = Field(
        default=None, description="Noisy grid counts, when the study has a grid."
    )


class ContributionPublic(_Output):
    """A stored contribution (also returned on an idempotent replay)."""

    id: int
    study_id: StudyId
    participant: Name
    config_version: int
    epsilon: Epsilon
    delta: Delta
    created_at: datetime
    model_version: int = Field(description="Model version after merging this contribution.")


class ModelPublic(_Output):
    """The merged global model: cell-wise sums of all contributions."""

    study_id: StudyId
    config_version: int
    version: int = Field(
        description='Model version; the ETag is `"<study>-<config version>-<version>"`.'
    )
    contributors: int = Field(description="Number of contributions summed.")
    lsh: EncodedCounts = Field(description="Summed LSH histogram.")
    grid: EncodedCounts | None = Field(default=None, description="Summed grid counts.")


class LedgerEntryPublic(_Output):
    """One charge on a participant's privacy ledger."""

    contribution_id: int
    study_id: StudyId
    kind: str = Field(description="What was released, e.g. `lsh+grid`.")
    epsilon: Epsilon
    delta: Delta
    created_at: datetime


class BudgetPublic(_Output):
    """A participant's privacy budget: cap, spent, remaining, itemised."""

    participant: Name
    active: bool
    epsilon_cap: Epsilon
    delta_cap: Delta
    epsilon_spent: Epsilon
    delta_spent: Delta
    epsilon_remaining: Epsilon
    delta_remaining: Delta
    entries: list[LedgerEntryPublic] = Field(default_factory=list)


class KeyPublic(_Output):
    """The coordinator's signing key, pinned by participants at enrolment."""

    key_id: str = Field(pattern=r"^sha256:[0-9a-f]{64}$", description="Key fingerprint.")
    public_key_pem: str = Field(description="Ed25519 public key, SubjectPublicKeyInfo PEM.")
