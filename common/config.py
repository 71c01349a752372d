"""Study configuration: validated public parameters and their canonical JSON.

The coordinator signs each study's :class:`StudyConfig` (public bounds, hash seed, detector and
privacy parameters, version, expiry) with :mod:`common.signing`; participants accept a config
only through :func:`common.signing.verify_config` (DESIGN 2).

Validation refuses settings that break privacy (zero epsilon, a grid released without noise,
a sparse grid without delta) and logs a warning for settings that only hurt utility (more than
10 epsilon per release), as OpenDP's ``loss_of`` does.

Canonical JSON is UTF-8, keys sorted, no whitespace, decimals as strings, datetimes as
ISO-8601 UTC with a ``Z`` suffix.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    WithJsonSchema,
    field_validator,
    model_serializer,
    model_validator,
)

from common.budget import DELTA_QUANTUM, EPSILON_QUANTUM, PrivacyBudget, decimal_field
from common.cellkeys import MAX_KEY_BITS
from common.cohorts.params import CohortParams
from common.grid import GridSpec, derive_projection
from common.hashing import LSHFamily, derive_lsh_family
from common.online.params import OnlineParams
from common.secagg.params import AggregationParams, modulus_bits

__all__ = [
    "MAX_GRID_CELL_LIMIT",
    "UTILITY_EPSILON_WARNING",
    "MAX_DELTA",
    "Epsilon",
    "Delta",
    "StudyId",
    "FeatureSpec",
    "LSHParams",
    "GridParams",
    "PrivacyParams",
    "StudyConfig",
    "canonical_json",
    "new_study_config",
]

logger = logging.getLogger(__name__)

MAX_GRID_CELL_LIMIT = 50_000_000
"""Largest grid released densely (the dense vector must fit on the wire)."""
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


@functools.lru_cache(maxsize=16)
def _derive_family(
    seed_hex: str, lo: tuple[float, ...], hi: tuple[float, ...], n_tables: int, sample_size: int
) -> LSHFamily:
    return derive_lsh_family(bytes.fromhex(seed_hex), lo, hi, n_tables, sample_size)


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
        le=MAX_GRID_CELL_LIMIT,
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


class StudyConfig(_Model):
    """Everything a participant needs to release and score; signed by the coordinator."""

    study_id: StudyId = Field(description="Study identifier.")
    version: int = Field(strict=True, ge=1, le=2**62, description="Config version, increasing.")
    issued_at: _UTC = Field(description="When the coordinator issued this version (UTC).")
    expires_at: _UTC = Field(description="After this instant participants refuse the config.")
    features: list[FeatureSpec] = Field(
        min_length=1, max_length=10_000, description="Schema, in column order."
    )
    lsh: LSHParams
    grid: GridParams | None = Field(default=None, description="Grid release, or null.")
    privacy: PrivacyParams
    aggregation: AggregationParams | None = Field(
        default=None,
        description="Release aggregation; null is independent noise (omitted from the JSON, so "
        "configs signed before secure aggregation keep their canonical form).",
    )
    online: OnlineParams | None = Field(
        default=None,
        description="Streaming mode (fedod-participant stream), or null; omitted from the "
        "JSON when null, so configs signed before it keep their canonical form.",
    )
    cohorts: CohortParams | None = Field(
        default=None,
        description="Private cohort rounds (issue 9); null: none (omitted from the JSON).",
    )

    @model_serializer(mode="wrap")
    def _omit_default_aggregation(self, handler: SerializerFunctionWrapHandler) -> Any:
        doc = handler(self)
        for optional in ("aggregation", "online", "cohorts"):
            if isinstance(doc, dict) and doc.get(optional) is None:
                doc.pop(optional, None)
        return doc

    @property
    def aggregation_mode(self) -> Literal["independent", "secure"]:
        return "independent" if self.aggregation is None else self.aggregation.mode

    def secure_modulus_bits(self) -> int:
        """Word size k of the secure sum (secure mode only; see common.secagg.params): wide
        enough for the LSH part and the dense grid part alike."""
        if self.aggregation is None or self.aggregation.mode != "secure":
            raise ValueError(f"study {self.study_id} does not use secure aggregation")
        bits = modulus_bits(self.aggregation, self.lsh.n_tables, self.privacy.epsilon_lsh)
        if self.grid is not None:
            bits = max(bits, modulus_bits(self.aggregation, 1, self.privacy.epsilon_grid))
        return bits

    @property
    def secure_cells(self) -> int:
        """Length of the vector a secure round sums: LSH cells, then the dense grid's."""
        return self.lsh_cells + self.grid_cells

    @model_validator(mode="after")
    def _consistent(self) -> StudyConfig:
        if self.expires_at <= self.issued_at:
            raise ValueError("expires_at must be after issued_at")
        names = [f.name for f in self.features]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"feature names must be unique; repeated: {dup}")
        p = self.privacy
        if self.grid is None:
            if p.epsilon_grid != 0 or p.delta_grid != 0:
                raise ValueError("epsilon_grid and delta_grid must be 0 when there is no grid")
        else:
            if p.epsilon_grid <= 0:
                raise ValueError(
                    "a grid needs epsilon_grid > 0 (0 means no grid: omit the grid section)"
                )
            unknown = sorted(set(self.grid.features or []) - set(names))
            if unknown:
                raise ValueError(f"grid features not in the schema: {unknown}")
            bits = (self.grid_cells - 1).bit_length()
            if bits > MAX_KEY_BITS:
                raise ValueError(
                    f"grid of {self.grid_cells} cells needs {bits}-bit cell keys, more than "
                    f"{MAX_KEY_BITS}; use fewer bins, fewer grid features or a projection"
                )
            if self.grid_layout == "sparse" and p.delta_grid <= 0:
                raise ValueError(
                    f"the grid has {self.grid_cells} cells, more than cell_limit "
                    f"{self.grid.cell_limit}, so it is released sparsely and needs "
                    "delta_grid > 0 (e.g. '1e-6'); or raise cell_limit / lower bins"
                )
            if self.grid_layout == "dense" and p.delta_grid != 0:
                raise ValueError(
                    "delta_grid must be 0 for a dense grid (pure epsilon-DP); "
                    "it would be charged for nothing"
                )
        if self.online is not None and self.online.dim != len(self.features) + 1:
            raise ValueError(f"online.dim must be the number of features + 1 (bias): "
                             f"{len(self.features) + 1}")
        if self.aggregation_mode == "secure":
            if self.grid is not None and self.grid_layout == "sparse":
                raise ValueError(
                    f"secure aggregation releases a dense grid only; this grid has "
                    f"{self.grid_cells} cells, more than cell_limit {self.grid.cell_limit}: "
                    "use fewer bins or grid features, or raise cell_limit"
                )
            self.secure_modulus_bits()
        total = p.epsilon_lsh + p.epsilon_grid
        if total > UTILITY_EPSILON_WARNING:
            logger.warning(
                "study %s spends epsilon %s per release (> %s): weak privacy protection",
                self.study_id,
                total,
                UTILITY_EPSILON_WARNING,
            )
        return self

    @property
    def lo(self) -> list[float]:
        return [f.lo for f in self.features]

    @property
    def hi(self) -> list[float]:
        return [f.hi for f in self.features]

    def release_cost(self) -> PrivacyBudget:
        """Cost of one release (LSH plus grid), for the ledgers."""
        p = self.privacy
        return PrivacyBudget(p.epsilon_lsh + p.epsilon_grid, p.delta_grid)

    def lsh_family(self) -> LSHFamily:
        """The RF-LSH family derived from the public seed (memoised per parameters)."""
        return _derive_family(
            self.lsh.seed, tuple(self.lo), tuple(self.hi), self.lsh.n_tables, self.lsh.sample_size
        )

    @property
    def lsh_cells(self) -> int:
        return self.lsh_family().n_cells

    def grid_feature_indices(self) -> tuple[int, ...] | None:
        if self.grid is None or self.grid.features is None:
            return None
        names = [f.name for f in self.features]
        return tuple(names.index(n) for n in self.grid.features)

    def grid_spec(self) -> GridSpec | None:
        if self.grid is None:
            return None
        projection = None
        if self.grid.projection is not None:
            d_used = len(self.grid.features or self.features)
            projection = derive_projection(bytes.fromhex(self.lsh.seed), d_used,
                                           self.grid.projection)
        return GridSpec(self.lo, self.hi, self.grid.bins, self.grid_feature_indices(),
                        projection)

    @property
    def grid_cells(self) -> int:
        """Number of grid cells ``bins ** d_g`` (any size: sparse keys widen), 0 without a grid."""
        if self.grid is None:
            return 0
        d_g = self.grid.projection or len(self.grid.features or self.features)
        return int(self.grid.bins**d_g)

    @property
    def grid_layout(self) -> Literal["dense", "sparse"] | None:
        if self.grid is None:
            return None
        return "dense" if self.grid_cells <= self.grid.cell_limit else "sparse"


def canonical_json(model: BaseModel | dict[str, Any]) -> bytes:
    """Canonical UTF-8 JSON: sorted keys, no whitespace, decimals as strings, UTC ``Z``."""
    doc = model.model_dump(mode="json") if isinstance(model, BaseModel) else model
    return json.dumps(
        doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def new_study_config(
    study_id: str,
    features: list[FeatureSpec],
    *,
    privacy: PrivacyParams,
    n_tables: int = 100,
    sample_size: int = 16,
    grid: GridParams | None = None,
    version: int = 1,
    valid_days: int = 365,
    seed: bytes | None = None,
    scoring: Literal["log", "mass"] | None = None,
    now: datetime | None = None,
    aggregation: AggregationParams | None = None,
    online: OnlineParams | None = None,
    cohorts: CohortParams | None = None,
) -> StudyConfig:
    """Build a config with a fresh 32-byte seed (unless given) and its LSH digest."""
    seed = os.urandom(32) if seed is None else seed
    if len(seed) != 32:
        raise ValueError("seed must be 32 bytes")
    family = derive_lsh_family(
        seed, [f.lo for f in features], [f.hi for f in features], n_tables, sample_size
    )
    issued = (now or datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
    return StudyConfig(
        study_id=study_id,
        version=version,
        issued_at=issued,
        expires_at=issued + timedelta(days=valid_days),
        features=features,
        lsh=LSHParams(
            n_tables=n_tables,
            sample_size=sample_size,
            seed=seed.hex(),
            digest=family.digest(),
            scoring=scoring,
        ),
        grid=grid,
        privacy=privacy,
        aggregation=None if aggregation == AggregationParams() else aggregation,
        online=online,
        cohorts=cohorts,
    )
