"""Typed fields and the public parameter sections of a study config.

:mod:`common.study.config` assembles these into the signed
:class:`~common.study.config.StudyConfig`; sections that belong to one protocol live in its own
package (``common.secagg.params``, ``common.online.params``, ``common.cohorts.params``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from common.budget import DELTA_QUANTUM, EPSILON_QUANTUM, decimal_field
from common.histograms.grid import DENSE_LIMIT


def omit_at_defaults(doc: Any, defaults: Mapping[str, object]) -> Any:
    """A serialised config section without the fields that hold the given defaults: fields
    added after such sections were first signed are left out at their default, so that
    configs signed before them keep their canonical form and their signatures verify."""
    if isinstance(doc, dict):
        for name, default in defaults.items():
            if name in doc and doc[name] == default:
                doc.pop(name)
    return doc


UTILITY_EPSILON_WARNING = Decimal(10)
"""Epsilon per release above which validation logs a warning."""
MAX_DELTA = Decimal("0.01")
"""A delta this large or larger is refused: it allows releasing individual records."""


def _decimal_out(value: Decimal) -> str:
    return format(value.normalize(), "f")


Epsilon = Annotated[
    Decimal,
    BeforeValidator(lambda v: decimal_field(v, EPSILON_QUANTUM, "epsilon")),
    PlainSerializer(_decimal_out, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "examples": ["0.5"]}),
]
"""Non-negative epsilon: a decimal string (or int) with at most 9 decimals; floats refused."""
Delta = Annotated[
    Decimal,
    BeforeValidator(lambda v: decimal_field(v, DELTA_QUANTUM, "delta")),
    PlainSerializer(_decimal_out, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "examples": ["0.000001"]}),
]
"""Non-negative delta: a decimal string with at most 18 decimals; floats refused."""
StudyId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
_Hex64 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
NTables = Annotated[int, Field(strict=True, ge=1, le=1000, description="Tables m.")]
SampleSize = Annotated[
    int,
    Field(
        strict=True,
        ge=2,
        le=65536,
        description="Expected table size s of the paper; sets the number of bits per table. "
        "Released tables are noisy: small tables (16, i.e. 2-4 bits) beat the paper's 1000.",
    ),
]
_UTC = Annotated[
    AwareDatetime,
    PlainSerializer(
        lambda d: d.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        return_type=str,
        when_used="json",
    ),
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FeatureSpec(_Model):
    """One feature of the study schema with its *public* bounds."""

    name: str = Field(min_length=1, max_length=128, description="Column name, unique.")
    lo: float = Field(strict=True, allow_inf_nan=False, description="Public lower bound.")
    hi: float = Field(strict=True, allow_inf_nan=False, description="Public upper bound, > lo.")

    @field_validator("name")
    @classmethod
    def _name_not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("feature name must not be blank")
        return v

    @model_validator(mode="after")
    def _lo_below_hi(self) -> FeatureSpec:
        if not self.lo < self.hi:
            raise ValueError(f"feature {self.name!r}: lo ({self.lo}) must be < hi ({self.hi})")
        return self


class LSHParams(_Model):
    """Public parameters of the LSH iTables release.

    ``seed`` and ``digest`` are filled in by the coordinator (:func:`new_study_config`).
    Optional detector parameters travel here too, so every participant scores alike.
    """

    n_tables: NTables = 100
    sample_size: SampleSize = 16
    seed: _Hex64 = Field(description="Public hash seed, 32 bytes as lowercase hex.")
    digest: _Hex64 = Field(
        description="SHA-256 of the hash functions derived from the seed (LSHFamily.digest())."
    )
    scoring: Literal["log", "mass"] | None = Field(
        default=None,
        description="Cell scoring of LSHiTables (`log`: paper, `mass`: noise-robust); "
        "null lets the detector choose.",
    )


class GridParams(_Model):
    """Public parameters of the DP grid k-NN release (Rauch, Olatunji & Khosla)."""

    bins: int = Field(default=4, strict=True, ge=1, le=1024, description="Intervals per axis.")
    features: list[str] | None = Field(
        default=None, description="Names of the features the grid uses; null means all."
    )
    k: int = Field(default=10, strict=True, ge=1, le=100_000, description="Neighbours k.")
    max_depth: int = Field(
        default=3, strict=True, ge=0, le=1000, description="Maximal L1 depth of the cell walk."
    )
    weighted: bool = Field(default=True, strict=True, description="Weighted k-NN score.")
    projection: int | None = Field(
        default=None,
        exclude_if=lambda v: v is None,  # configs signed before the field keep their bytes
        strict=True,
        ge=1,
        le=256,
        description="Grid over this many random +-1 projections of the grid features, derived "
        "from the public seed `lsh.seed` (never from data); null: the features themselves.",
    )
    cell_limit: int = Field(
        default=1_000_000,
        strict=True,
        ge=1,
        le=DENSE_LIMIT,
        description="Grids with more cells are released sparsely ((epsilon, delta)-DP).",
    )

    @field_validator("features")
    @classmethod
    def _unique(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (not v or len(set(v)) != len(v)):
            raise ValueError("grid features must be a non-empty list of distinct names")
        return v


class PrivacyParams(_Model):
    """Per-release privacy cost. Each release spends ``epsilon_lsh + epsilon_grid`` and
    ``delta_grid`` (only a sparse grid has a delta)."""

    epsilon_lsh: Epsilon = Field(description="Epsilon of the LSH release, > 0 (string).")
    epsilon_grid: Epsilon = Field(
        default=Decimal(0), description="Epsilon of the grid release; 0 means no grid."
    )
    delta_grid: Delta = Field(
        default=Decimal(0), description="Delta of a sparse grid release, else 0."
    )

    @model_validator(mode="after")
    def _positive(self) -> PrivacyParams:
        if self.epsilon_lsh <= 0:
            raise ValueError("epsilon_lsh must be > 0: an LSH release without noise is not private")
        if self.delta_grid >= MAX_DELTA:
            raise ValueError(
                f"delta_grid {self.delta_grid} is too large (must be < {MAX_DELTA}); "
                "use about 1e-6 or less"
            )
        return self
