"""Wire models of the round endpoints (``/v1/studies/{id}/rounds``, ``/v1/me/identity-key``)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from common.secagg.membership import SignedMembership
from common.secagg.messages import B64, Name, SignedMessage

__all__ = ["IdentityKeyCreate", "IdentityKeyPublic", "RoundPublic", "RoundState", "RoundStatus",
           "BeaconPending", "BeaconCreate", "BeaconDraw"]


class RoundStatus(StrEnum):
    """The phase of a round attempt; the value is the string the database and the JSON hold.

    ``beacon`` (studies whose masking graph needs one only, common.secagg.beacon): the roster
    is signed and waits for the consortium's beacon signature before members mask.
    ``rejected``: the revealed sum failed :func:`common.secagg.checks.check_secure_sum` and
    was not merged (``detail`` says why); like ``abandoned``, the round is over and the next
    opens.
    """

    KEYS = "keys"
    BEACON = "beacon"
    MASKING = "masking"
    UNMASK = "unmask"
    RECOVER = "recover"
    DONE = "done"
    RESTARTED = "restarted"
    ABANDONED = "abandoned"
    REJECTED = "rejected"

    __repr__ = str.__repr__  # messages quote the bare string, as before


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


class BeaconDraw(BaseModel):
    """One member's draw count in a roster and the consortium key's signature over its
    statement (:func:`common.secagg.draws.draw_message`)."""

    model_config = ConfigDict(extra="forbid")
    count: int = Field(strict=True, ge=1, le=2**62)
    signature: B64 = Field(min_length=88, max_length=88)


class RoundState(RoundPublic):
    """What a member needs to take its next step (``expected``: the member itself if it is in
    the attempt, else empty).

    ``request`` is the unmask request, or in phase ``recover`` the recover request (neither
    in other phases); ``inbox``
    (recover phase only) holds the shares the lost members sealed for the caller.

    ``roster`` (who is in: a bitmap over the certified members) comes with ``adverts``, the
    advert frames of the caller's graph neighbours only (common.secagg.graph); both are left
    out (null, empty) when the caller says it already holds the roster whose digest is
    ``roster_digest`` (``?known_roster=``), with the beacon signature and draw statement that
    came with it, as is the membership certificate when it holds
    that (``?known_membership=``): a member re-reads the state at every step while it waits.
    ``acks`` (unmask phase): the roster acknowledgements of the caller's graph neighbours.

    Compact (common.secagg.view): the member's view leaves out what the member knows or does
    not use: ``study_id``, ``created_at``, ``finished_at``, and the counts (``cohort``,
    ``masked``, ``survivors``, ``recovered_by``) until the round is over; ``roster_digest``
    when the roster is sent (it is the roster's SHA-256) or is the one the caller named in
    ``?known_roster=``; and in the payloads of ``roster``, ``request`` (unmask and recover)
    the study, round, attempt, config digest, word size, degree, threshold, roster size (the
    bitmap's bits), roster digest and the recover request's lost members (the keys of
    ``inbox``), which the member puts back before it verifies the
    coordinator's signature over the full canonical payload."""

    study_id: str = ""
    expected: list[str] = Field(default_factory=list, description="The caller alone if it is "
                                "in the attempt, else empty.")
    cohort: int = 0
    masked: int = 0
    survivors: int = 0
    created_at: datetime | None = None  # type: ignore[assignment]
    finished_at: datetime | None = None

    roster: SignedMessage | None = None
    roster_digest: str | None = Field(
        default=None, description="SHA-256 of this attempt's full roster payload: left out "
        "before the roster, when the roster is sent, and when it is the caller's known_roster."
    )
    membership: SignedMembership | None = Field(
        default=None,
        description="The consortium-signed membership certificate, sent with the roster (and "
        "left out with it): a member masks only if every roster member is certified.",
    )
    adverts: str = Field(
        default="", description="The caller's graph neighbours' advert frames without their "
        "11-byte headers (96 bytes each: X25519 key, signature), in neighbour order (sorted "
        "by name), base85 (RFC 1924 alphabet, Python's base64.b85encode).")
    beacon: str | None = Field(
        default=None, description="Beacon studies, served with the roster (left out with "
        "it): the consortium key's Ed25519 signature over the roster (common.secagg.beacon, "
        "base64), which seeds the masking graph; a member verifies it under the key it pinned.")
    draw: BeaconDraw | None = Field(
        default=None, description="Beacon studies, served with the roster (left out with "
        "it): the caller's own draw count signed by the consortium key (common.secagg.draws); "
        "a member masks only if it is at most BEACON_DRAWS above the count of its last masked "
        "release.")
    request: SignedMessage | None = None
    acks: str = Field(
        default="", description="The roster acknowledgements the caller's graph neighbours "
        "addressed to it (16 bytes each, common.secagg.wire.ack_tag), in neighbour order, "
        "base85.")
    inbox: dict[str, str] = Field(default_factory=dict)
    wire: int = Field(
        default=2, description="The secure-aggregation wire version the coordinator speaks "
        "(common.secagg.wire.WIRE); absent: 2. A member refuses a coordinator of another "
        "version before it sends anything.")
    done: list[Literal["advert", "masked", "unmask", "shares"]] = Field(default_factory=list)


class BeaconPending(BaseModel):
    """The attempt waiting for the consortium's beacon signature, with its full signed roster
    (``GET /v1/studies/{id}/rounds/beacon``)."""

    study_id: str
    round: int
    attempt: int
    roster: SignedMessage


class BeaconCreate(BaseModel):
    """The consortium key's beacon signature over a roster (``POST .../rounds/{n}/beacon``).

    ``consortium_key`` must be the key that signed the study's stored membership certificate;
    the coordinator checks that, then the signature under it."""

    model_config = ConfigDict(extra="forbid")
    attempt: int = Field(strict=True, ge=1, le=10_000)
    roster_digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    signature: B64 = Field(min_length=88, max_length=88)
    consortium_key: B64 = Field(min_length=44, max_length=44)
    draws: dict[Name, BeaconDraw] = Field(
        default_factory=dict, max_length=1000,
        description="Per roster member (exactly the roster's members): its draw count and "
        "the consortium key's signature over it (common.secagg.draws).")
