"""Public aggregation parameters of a study (in the signed
:class:`~common.study.config.StudyConfig`).

``mode="independent"`` is today's release: every participant adds a full discrete Laplace and
contributes whenever it likes. ``mode="secure"`` runs release rounds with secure aggregation
(:mod:`common.secagg`): the cohort size ``n``, the tolerated ``dropouts`` D and ``colluders`` T
are fixed when the study is created and signed, hence

- ``h_min = n - D - T``: the fewest honest noise shares any revealed sum carries, as seen by
  anyone who pools the shares of up to T participants. Every participant receives the model and
  knows its own share, so ``colluders >= 1`` always (the viewer itself);
- ``degree`` k: each member masks with, and shares its self-mask seed among, only its k
  neighbours in the round's masking graph (:mod:`common.secagg.graph`, SecAgg+), k the smallest
  even degree whose failure bound (honest members disconnected, or a seed within the
  colluders' reach) is at most ``2**-40`` (complete for small n); every sparse graph is drawn
  from the consortium's beacon signature over the roster (:mod:`common.secagg.beacon`), at
  most ``G = 8`` draws including a member between two of its masked releases
  (:mod:`common.secagg.draws`), its bound charged ``G`` times;
- ``threshold`` t: Shamir threshold of a self-mask seed among the k neighbours, at least
  ``min(T + D, floor(k (T + D) / (n - 2D - T))) + 1``. Two attempts of one round are never
  both revealed: the earlier one needs, for each of the at least ``n - 2D - T`` honest members
  in both rosters (who help only the last attempt they masked), t shares held by colluders or
  by the at most D honest members in its roster only, who hold ``k (T + D)`` shares in all.
  In a sparse graph t is also large enough that the colluding neighbours of no member hold t
  shares of its seed except with a probability charged as delta (SecAgg+, Bell et al. 2020;
  :func:`common.secagg.graph.share_threshold`): a member's seed is never known to the
  coordinator without its own answer or that of honest neighbours.
  Validated as before: ``floor((n + T) / 2) + 1 + D <= n`` (so ``n - 2D - T >= 1``).
- ``max_records``: a *public* bound per cell. Each count is clipped to ``[0, max_records]``
  (clipping is 1-Lipschitz per cell, so the L1 sensitivity stays ``n_tables``); it and the
  noise tail fix the word size ``k`` of the arithmetic mod ``2**k`` (:func:`modulus_bits`).
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from common.secagg.draws import BEACON_DRAWS
from common.secagg.graph import graph_degree, graph_delta, share_threshold
from common.study.params import omit_at_defaults

__all__ = ["AggregationParams", "modulus_bits", "NOISE_TAIL_NATS"]

NOISE_TAIL_NATS = 60
"""The word size leaves room for noise up to ``scale * (2r + 60)``: exceeded with probability
below ``e**-50`` per cell for the r = ceil(n/h_min) Laplace-equivalents of the summed shares."""


class AggregationParams(BaseModel):
    """How releases are aggregated; ``secure`` fixes the cohort and trust assumption."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["independent", "secure"] = Field(
        default="independent",
        description="independent: each release carries a full noise draw, any time; "
        "secure: release rounds with secure aggregation and distributed noise.",
    )
    cohort_size: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=1000,
        description="n: participants in a round (secure: required, >= 3). Independent: "
        "optional, declared to choose the tables.",
    )
    max_dropouts: int = Field(default=0, strict=True, ge=0, description="D: dropouts tolerated.")
    max_colluders: int = Field(
        default=1,
        strict=True,
        ge=1,
        description="T: participants that may pool their shares (>= 1: each sees the model).",
    )
    h_min: int | None = Field(
        default=None, strict=True, description="n - D - T, stated so the signature covers it."
    )
    expected_records: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=10**10,
        description="Administrator-declared expected records per participant (public, never "
        "measured); chooses the LSH tables and drives the noise warning (common.noise).",
    )
    max_records: int = Field(
        default=1_000_000,
        strict=True,
        ge=1,
        le=2**40,
        description="Public bound on one participant's count per cell (counts are clipped).",
    )
    open_rounds: Literal["admin", "when_ready"] = Field(
        default="admin",
        description="Who opens secure rounds: 'admin' (fedod-coordinator rounds open); "
        "'when_ready': the coordinator opens round 1 itself once every certified member has "
        "registered its identity key (coordinator.services.secagg.auto). Omitted from the "
        "JSON at 'admin', so configs signed before it keep their bytes.",
    )

    @model_serializer(mode="wrap")
    def _omit_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        return omit_at_defaults(handler(self), {"open_rounds": "admin"})

    @model_validator(mode="before")
    @classmethod
    def _fill_h_min(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("mode") == "secure" and data.get("h_min") is None:
            n, d, t = (
                data.get("cohort_size"),
                data.get("max_dropouts", 0),
                data.get("max_colluders", 1),
            )
            if all(isinstance(v, int) for v in (n, d, t)):
                data = {**data, "h_min": n - d - t}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> AggregationParams:
        if self.mode == "independent":
            if self.max_dropouts or self.h_min is not None:
                raise ValueError("max_dropouts and h_min apply to secure aggregation only")
            return self
        n = self.cohort_size
        if n is None or n < 3:
            raise ValueError("secure aggregation needs cohort_size (n >= 3)")
        h_min = n - self.max_dropouts - self.max_colluders
        if h_min < 1:
            raise ValueError(
                f"cohort {n} with {self.max_dropouts} dropouts and {self.max_colluders} colluders "
                "leaves no honest participant (h_min < 1)"
            )
        if self.h_min != h_min:
            raise ValueError(f"h_min must be n - dropouts - colluders = {h_min}")
        majority = (n + self.max_colluders) // 2 + 1
        if majority + self.max_dropouts > n:
            raise ValueError(
                f"cannot tolerate {self.max_dropouts} dropouts with {self.max_colluders} "
                f"colluders in a cohort of {n}: dropouts must be <= {n - majority} "
                "(floor((n + colluders) / 2) + 1 + dropouts <= n)"
            )
        return self

    @property
    def degree(self) -> int:
        """Neighbours per member in the masking graph (``n - 1``: complete; secure only)."""
        if self.cohort_size is None:
            raise ValueError("independent mode has no masking graph")
        return graph_degree(self.cohort_size, self.max_dropouts, self.max_colluders)

    @property
    def needs_beacon(self) -> bool:
        """True for every sparse masking graph: its graph is then seeded from the
        consortium's beacon signature over each roster (:mod:`common.secagg.beacon`) and a
        round waits for it in phase ``beacon``. Nobody can grind a sparse graph, whatever its
        bound (a coordinator that could draw graphs at will could place a victim among
        colluders, or give members of one attempt different graphs)."""
        return (self.mode == "secure" and self.cohort_size is not None
                and self.degree < self.cohort_size - 1)

    @property
    def graph_delta(self) -> Decimal:
        """Probability bound, per round, that the masking graph leaves the honest members
        disconnected: :data:`~common.secagg.draws.BEACON_DRAWS` times the per-graph bound
        (:func:`common.secagg.graph.graph_delta`; a member masks only under one of at most that
        many beacon draws including it since its last masked release, whatever rounds the
        coordinator aborted), rounded up to a multiple of 1e-18: added to the delta of every
        secure release (0 for the complete graph and whenever the colluders are fewer than the
        degree: no beacon, one draw that cannot be bad)."""
        if self.mode != "secure" or self.cohort_size is None:
            return Decimal(0)
        bound = graph_delta(self.cohort_size, self.max_dropouts, self.max_colluders)
        return Decimal(math.ceil(BEACON_DRAWS * bound * 10**18)) / Decimal(10**18)

    @property
    def threshold(self) -> int:
        """Shamir threshold t of a seed among its owner's neighbours (secure mode only)."""
        if self.cohort_size is None:
            raise ValueError("independent mode has no unmask threshold")
        return share_threshold(self.cohort_size, self.max_dropouts, self.max_colluders,
                               self.degree)

    @property
    def min_roster(self) -> int:
        """Smallest roster a round may run with: n - D."""
        if self.cohort_size is None:
            raise ValueError("independent mode has no roster")
        return self.cohort_size - self.max_dropouts

    def require_h_min(self) -> int:
        if self.h_min is None:
            raise ValueError("independent mode has no h_min")
        return self.h_min


def modulus_bits(params: AggregationParams, sensitivity: int, epsilon: Decimal) -> int:
    """The smallest word size k so that the cohort's sum never wraps mod ``2**k`` in practice.

    The sum lies in ``[-B, n * max_records + B]`` with ``B = scale * (2r + NOISE_TAIL_NATS)``,
    ``scale = sensitivity / epsilon`` and ``r = ceil(n / h_min)`` (outside it with probability
    below ``e**-50`` per cell); k holds it as a signed word. Masked words travel packed to
    exactly k bits, so every bit saved here is ``cells / 8`` bytes less per upload.
    """
    n, h_min = params.cohort_size, params.require_h_min()
    assert n is not None
    if epsilon <= 0 or sensitivity < 1:
        raise ValueError("epsilon must be > 0 and sensitivity >= 1")
    scale = Decimal(sensitivity) / epsilon
    r = -(-n // h_min)
    bound = (
        n * params.max_records + int((scale * (2 * r + NOISE_TAIL_NATS)).to_integral_value()) + 1
    )
    k = bound.bit_length() + 1
    if k > 64:
        raise ValueError(f"the sum needs {k} bits; lower max_records or raise epsilon")
    return k
