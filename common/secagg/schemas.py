"""Wire models of the round endpoints (``/v1/studies/{id}/rounds``, ``/v1/me/identity-key``)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from common.secagg.membership import SignedMembership
from common.secagg.messages import B64, SignedMessage

__all__ = ["IdentityKeyCreate", "IdentityKeyPublic", "RoundPublic", "RoundState", "RoundStatus"]

RoundStatus = Literal[
    "keys", "masking", "unmask", "recover", "done", "restarted", "abandoned", "rejected"
]
"""``rejected``: the revealed sum failed :func:`common.secagg.checks.check_secure_sum` and was
not merged (``detail`` says why); like ``abandoned``, the round is over and the next opens."""


class IdentityKeyCreate(BaseModel):
    """A participant's long-term Ed25519 identity key (raw 32 bytes, base64) and the proof
    that the caller holds it (:mod:`common.secagg.identity`)."""

    model_config = ConfigDict(extra="forbid")
    public_key: B64 = Field(min_length=44, max_length=44)
    proof: B64 = Field(
        min_length=88, max_length=88,
        description="Ed25519 signature by the identity key over 'fedod-secagg/identity-key/1' "
        "NUL coordinator key id NUL participant name NUL raw public key (base64, 64 bytes).",
    )


class IdentityKeyPublic(BaseModel):
    participant: str
    public_key: str
    created_at: datetime


class RoundPublic(BaseModel):
    """One attempt of a release round, as the admin and the dashboard see it."""

    study_id: str
    round: int
    attempt: int
    status: RoundStatus
    mode: Literal["secure"] = "secure"
    expected: list[str] = Field(description="Who may post keys in this attempt.")
    cohort: int = Field(description="Roster size (members whose keys are in the roster).")
    masked: int = Field(description="Masked vectors received.")
    survivors: int = Field(description="Members that answered the unmask request.")
    recovered_by: int = Field(
        default=0, description="Shares answers received in the recover phase (members lost "
        "after masking only)."
    )
    detail: str | None = None
    created_at: datetime
    finished_at: datetime | None


class RoundState(RoundPublic):
    """What a member needs to take its next step.

    ``request`` is the unmask request, or in phase ``recover`` the recover request; ``inbox``
    (recover phase only) holds the shares the lost members sealed for the caller.

    ``roster`` is left out (null) when the caller says it already holds the roster whose
    digest is ``roster_digest`` (``?known_roster=``): a roster is O(n) signed adverts, and a
    member re-reads the state at every step while it waits for the others."""

    roster: SignedMessage | None = None
    roster_digest: str | None = Field(
        default=None, description="SHA-256 of this attempt's roster payload (null before it)."
    )
    membership: SignedMembership | None = Field(
        default=None,
        description="The consortium-signed membership certificate, sent with the roster (and "
        "left out with it): a member masks only if every roster member is certified.",
    )
    request: SignedMessage | None = None
    inbox: dict[str, str] = Field(default_factory=dict)
    done: list[Literal["advert", "masked", "unmask", "shares"]] = Field(default_factory=list)
