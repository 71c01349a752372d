"""Wire models of streaming mode: a noisy gradient release and the online model it feeds.

A vector travels as base64 of float64 little-endian (``encode_vector``/``decode_vector``).
Only the noisy release (DP-FTRL: the member's prefix increment; FLMB: the noisy batch sum),
the batch's count of queried slots (post-processing of the private
query decisions), the schedule window it closes, the weights version it was computed against
and the claimed charge (one window's) leave a participant. The centring window's release
(``OnlineParams.centre_window``) has the same shape: the noisy sum of its slots' records and,
as count, the window's public number of slots.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from common.online.params import _Delta, _Eps
from common.online.vectors import decode_vector, encode_vector

__all__ = [
    "CENTRE_FIXED",
    "OnlineGradientCreate",
    "OnlineGradientPublic",
    "OnlineModelPublic",
    "decode_vector",
    "encode_vector",
]

CENTRE_FIXED = "the centre is fixed"
"""In the coordinator's 409 detail for a centring release that arrives after the first step:
the participant then stops re-sending that release (nothing was stored or charged there)."""

_Key = Annotated[str, Field(min_length=16, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")]


class OnlineGradientCreate(BaseModel):
    """One noisy mini-batch gradient sum of a participant's stream."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    idempotency_key: _Key = Field(description="The same for every retry of this release.")
    config_version: int = Field(strict=True, ge=1)
    config_digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    weights_version: int = Field(strict=True, ge=0,
                                 description="Online model version the gradient was taken at.")
    window: int = Field(strict=True, ge=0, description="The schedule window this release "
                        "closes (one release per window, sent once the window has ended).")
    count: int = Field(strict=True, ge=0, le=10_000_000,
                       description="Queried slots of the window (post-processing of the "
                       "private query decisions; 0: the release carries noise only); for the "
                       "centring window: its number of slots (public).")
    noisy_sum: str = Field(description="DP-FTRL: the increment of the member's noisy prefix "
                           "sum of gradients; FLMB: the noisy gradient sum (centring window: "
                           "noisy sum of its records), base64 float64 little-endian.")
    epsilon: _Eps = Field(description="Claimed epsilon: one window's charge.")
    delta: _Delta = Field(default=Decimal(0), description="Claimed delta: one window's charge.")


class OnlineGradientPublic(BaseModel):
    """A stored gradient release (also the answer to a replay)."""

    model_config = ConfigDict(frozen=True)

    id: int
    study_id: str
    weights_version: int
    epsilon: _Eps
    delta: _Delta
    model_version: int = Field(description="Online model version after this release.")


class OnlineModelPublic(BaseModel):
    """The current online classifier of a study."""

    model_config = ConfigDict(frozen=True)

    study_id: str
    config_version: int
    version: int = Field(description="Number of SGD steps taken (0: all-zero weights).")
    pending: int = Field(description="Releases received towards the next step.")
    weights: str = Field(description="Current weights (DP-FTRL: -eta x the members' summed "
                         "prefix sums; FLMB: the SGD iterate), base64 float64 little-endian "
                         "(dim values): gradients are taken at them.")
    average: str = Field(description="FLMB: running mean of the iterates, same encoding "
                         "(scoring and the query rule use it when the config's `average` is "
                         "on); DP-FTRL: the weights.")
    centre: str | None = Field(default=None, description="With the config's `centre_window`: "
                               "the centre (same encoding) every record is centred on before "
                               "scoring, querying and gradients; null until a centring release "
                               "arrives.")
    centre_releases: int = Field(default=0, description="Centring releases summed into it "
                                 "(fixed once the first step is taken).")
