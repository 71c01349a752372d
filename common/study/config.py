"""Study configuration: validated public parameters and their canonical JSON.

The coordinator signs each study's :class:`StudyConfig` (public bounds, hash seed, detector and
privacy parameters, version, expiry) with :mod:`common.study.signing`; participants accept a config
only through :func:`common.study.signing.verify_config` (docs/TRUST.md: who must be honest for
what).

The parameter sections and typed fields live in :mod:`common.study.params`.

Validation refuses settings that break privacy (zero epsilon, a grid released without noise,
a sparse grid without delta) and logs a warning for settings that only hurt utility (more than
10 epsilon per release), as OpenDP's ``loss_of`` does.

Canonical JSON (:func:`common.study.canonical.canonical_json`, re-exported here) is what is signed.
"""

from __future__ import annotations

import functools
import logging
import os
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from common.budget import PrivacyBudget
from common.cohorts.params import CohortParams
from common.histograms.cellkeys import MAX_KEY_BITS
from common.histograms.grid import GridSpec, derive_projection
from common.histograms.hashing import LSHFamily, derive_lsh_family
from common.online.params import OnlineParams
from common.secagg.params import AggregationParams, modulus_bits
from common.study.canonical import canonical_json
from common.study.delta_floor import check_delta
from common.study.params import (
    _UTC,
    MAX_DELTA,
    UTILITY_EPSILON_WARNING,
    Delta,
    Epsilon,
    FeatureSpec,
    GridParams,
    LSHParams,
    PrivacyParams,
    StudyId,
    _Model,
    omit_at_defaults,
)

__all__ = ["UTILITY_EPSILON_WARNING", "MAX_DELTA", "Epsilon", "Delta",
           "StudyId", "FeatureSpec", "LSHParams", "GridParams", "PrivacyParams", "StudyConfig",
           "canonical_json", "new_study_config"]

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=16)
def _derive_family(
    seed_hex: str, lo: tuple[float, ...], hi: tuple[float, ...], n_tables: int, sample_size: int
) -> LSHFamily:
    return derive_lsh_family(bytes.fromhex(seed_hex), lo, hi, n_tables, sample_size)


_LATER_SECTIONS = {"aggregation": None, "online": None, "cohorts": None}
"""Sections added after configs were first signed: omitted from the JSON when null."""


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
        description="Private cohort rounds (docs/COHORTS.md); null: none (omitted from the JSON).",
    )

    @model_serializer(mode="wrap")
    def _omit_later_sections(self, handler: SerializerFunctionWrapHandler) -> Any:
        return omit_at_defaults(handler(self), _LATER_SECTIONS)

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
            if self.grid_layout == "sparse":
                check_delta(p.delta_grid, "delta_grid")
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
        """Cost of one release (LSH plus grid), for the ledgers; a secure release adds the
        masking graph's failure probability to delta (AggregationParams.graph_delta)."""
        p = self.privacy
        graph = self.aggregation.graph_delta if self.aggregation is not None else 0
        return PrivacyBudget(p.epsilon_lsh + p.epsilon_grid, p.delta_grid + graph)

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
