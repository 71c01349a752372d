"""Public aggregation parameters of a study (in the signed :class:`~common.config.StudyConfig`).

``mode="independent"`` is today's release: every participant adds a full discrete Laplace and
contributes whenever it likes. ``mode="secure"`` runs release rounds with secure aggregation
(:mod:`common.secagg`): the cohort size ``n``, the tolerated ``dropouts`` D and ``colluders`` T
are fixed when the study is created and signed, hence

- ``h_min = n - D - T``: the fewest honest noise shares any revealed sum carries, as seen by
  anyone who pools the shares of up to T participants. Every participant receives the model and
  knows its own share, so ``colluders >= 1`` always (the viewer itself);
- ``threshold = floor((n + T) / 2) + 1``: Shamir threshold of the self-mask seeds. Two revealed
  sums over different rosters would need two disjoint sets of honest unmask helpers of size
  ``threshold - T`` each, impossible when ``2 * threshold > n + T``; recovering after D dropouts
  needs ``threshold <= n - D`` (validated).
- ``max_records``: a *public* bound per cell. Each count is clipped to ``[0, max_records]``
  (clipping is 1-Lipschitz per cell, so the L1 sensitivity stays ``n_tables``); it and the
  noise tail fix the word size ``k`` of the arithmetic mod ``2**k`` (:func:`modulus_bits`).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
        if self.threshold + self.max_dropouts > n:
            raise ValueError(
                f"cannot tolerate {self.max_dropouts} dropouts with {self.max_colluders} "
                f"colluders in a cohort of {n}: the unmask threshold {self.threshold} needs "
                f"dropouts <= {n - self.threshold}"
            )
        return self

    @property
    def threshold(self) -> int:
        """Shamir threshold t = floor((n + T) / 2) + 1 (secure mode only)."""
        if self.cohort_size is None:
            raise ValueError("independent mode has no unmask threshold")
        return (self.cohort_size + self.max_colluders) // 2 + 1

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
