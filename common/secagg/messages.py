"""Round messages of secure aggregation and their Ed25519 signatures.

The messages every member sends in every round are binary frames (:mod:`.wire`): advert,
masked, unmask. The others are a :class:`SignedMessage`: the canonical JSON of a body and an
Ed25519 signature over ``b"fedod-secagg/<kind>/1\\x00" + payload``, so a signature made for
one kind of message (or for a study config) never verifies as another. Participants sign with
their long-term identity key (registered at enrolment); the coordinator signs rosters and
requests with its config key. Every body names study, round and attempt, so a message replayed
into another round or attempt is refused by :func:`open_message`'s caller.

    advert    participant -> all   (frame) X25519 key of the attempt
    roster    coordinator -> all   who is in (a bitmap over the certified members), a digest of
                                   their adverts, k, degree, threshold; the masking graph follows
                                   from its digest, and each member is served its neighbours'
                                   advert frames beside it
    masked    participant -> coord (frame) masked words, commitment to b_u, b_u's shares sealed
                                   for each holder, roster acknowledgements
    request   coordinator -> all   "every roster vector is in: unmask" (with each member's
                                   neighbours' roster acknowledgements beside it)
    unmask    participant -> coord (frame) its own self-mask seed b_u
    recover   coordinator -> all   "these members sent vectors but not b_u: send your shares"
    shares    participant -> coord (frame) its shares of those members' seeds (only then)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Annotated, Literal, TypeVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from common.errors import Conflict, SignatureInvalid
from common.study.canonical import canonical_json
from common.study.params import StudyId

__all__ = [
    "SignedMessage",
    "RoundRef",
    "AdvertBody",
    "RosterBody",
    "RequestBody",
    "RecoverBody",
    "sign_message",
    "open_message",
    "b64e",
    "b64d",
    "RoundRefused",
    "raw_ed25519",
]

Kind = Literal["roster", "request", "recover"]
B64 = Annotated[str, Field(pattern=r"^[A-Za-z0-9+/]*={0,2}$", max_length=64_000_000)]
Name = Annotated[str, Field(min_length=1, max_length=64)]
Body = TypeVar("Body", bound=BaseModel)


def b64e(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64d(text: str, *, size: int | None = None) -> bytes:
    """Strict base64; SignatureInvalid when malformed or not ``size`` bytes long."""
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SignatureInvalid("malformed base64 in a round message") from exc
    if size is not None and len(data) != size:
        raise SignatureInvalid(f"expected {size} bytes in a round message, got {len(data)}")
    return data


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SignedMessage(_Model):
    """A signed round message (canonical JSON payload + base64 Ed25519 signature)."""

    kind: Kind
    payload: str = Field(max_length=64_000_000)
    signature: B64

    def digest(self) -> str:
        return hashlib.sha256(self.payload.encode("utf-8")).hexdigest()


class RoundRef(_Model):
    """Which study, release round and attempt (attempts restart a round after dropouts)."""

    study_id: StudyId
    round: int = Field(strict=True, ge=1, le=2**62)
    attempt: int = Field(strict=True, ge=1, le=10_000)

    @property
    def round_id(self) -> str:
        return f"{self.study_id}/{self.round}/{self.attempt}"

    def ref(self) -> RoundRef:
        return RoundRef(study_id=self.study_id, round=self.round, attempt=self.attempt)


class AdvertBody(RoundRef):
    """An advert frame's fields, read from a roster (:func:`common.secagg.wire.open_advert`)."""

    participant: Name
    identity_key: B64 = Field(description="Raw Ed25519 identity public key (32 bytes).")
    round_key: B64 = Field(
        description="Raw X25519 public key of this attempt (pairwise mask seeds and the keys "
        "sealing seed shares, under separate HKDF labels)."
    )


class RosterBody(RoundRef):
    config_digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    modulus_bits: int = Field(strict=True, ge=2, le=64)
    degree: int = Field(strict=True, ge=1, description="Masking-graph degree of the study "
                        "(common.secagg.graph; >= roster size - 1: complete).")
    threshold: int = Field(strict=True, ge=1, description="Shamir threshold among neighbours.")
    size: int = Field(strict=True, ge=1, description="Members in the roster.")
    members: B64 = Field(
        max_length=2000,
        description="Bitmap over the certified members sorted by name (member i is bit i % 8 "
        "of byte i // 8): who is in the roster. Binary: n / 8 bytes, not n names and keys.")
    adverts_digest: str = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="SHA-256 over the SHA-256 of each member's advert frame, in name order: "
        "the fresh X25519 keys every member chose enter the graph's public randomness.")


class RequestBody(RoundRef):
    roster_digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    included: int = Field(strict=True, ge=1, description="Members whose masked vectors are in "
                          "the sum: the roster size (a partial sum is never revealed).")


class RecoverBody(RoundRef):
    roster_digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    missing: list[Name] = Field(
        min_length=1,
        description="Members that sent a masked vector but not their self seed (a member is "
        "served a request naming only the lost members it neighbours in the masking graph).")


def _context(kind: str) -> bytes:
    return b"fedod-secagg/" + kind.encode("ascii") + b"/1\x00"


def sign_message(kind: Kind, body: BaseModel, key: Ed25519PrivateKey) -> SignedMessage:
    payload = canonical_json(body)
    return SignedMessage(
        kind=kind,
        payload=payload.decode("utf-8"),
        signature=b64e(key.sign(_context(kind) + payload)),
    )


def open_message(
    signed: SignedMessage, kind: Kind, model: type[Body], key: Ed25519PublicKey
) -> Body:
    """Verify kind and signature, then parse the body; SignatureInvalid otherwise."""
    if signed.kind != kind:
        raise SignatureInvalid(f"expected a {kind} message, got {signed.kind}")
    payload = signed.payload.encode("utf-8")
    try:
        key.verify(b64d(signed.signature), _context(kind) + payload)
    except InvalidSignature as exc:
        raise SignatureInvalid(f"{kind} message: signature does not verify") from exc
    try:
        return model.model_validate_json(payload)
    except ValidationError as exc:
        raise SignatureInvalid(f"{kind} message: malformed body: {exc}") from exc


def raw_ed25519(text: str) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(b64d(text, size=32))


class RoundRefused(Conflict):
    """A round message out of order, replayed into another round, or against the rules."""
