"""Certified membership: who may be in a study's secure rounds, signed by a consortium key.

The coordinator builds rosters, so a roster checked only against the identity keys the
coordinator lists protects nothing: a coordinator that registers n - 1 identities of its own
recovers the one honest member's noisy vector exactly. The list of member identity keys is
therefore signed by a *consortium key* that the coordinator does not hold (the hospitals'
data-protection officer keeps it, ``fedod-consortium``) and every participant pins its public
key at enrolment. A roster names its members by a bitmap over the certificate's members, a
member verifies its neighbours' adverts under the identity keys certified here, and masks only
if the roster is at least ``max(n - D, h_min)`` long
(:func:`common.secagg.participant.check_roster`).

A certificate is the canonical JSON of a :class:`MembershipBody` and an Ed25519 signature over
``b"fedod-membership/1\\x00" + payload`` (its own context: it never verifies as a config or a
round message). It names the study, a version, an expiry, the cohort parameters it certifies
(which must equal the signed config's ``aggregation``) and exactly ``cohort_size`` members.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Annotated

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from common.secagg.messages import B64, Name, RoundRefused, b64d, b64e
from common.secagg.params import AggregationParams
from common.study.canonical import canonical_json
from common.study.params import StudyId

__all__ = [
    "CONTEXT",
    "MembershipBody",
    "SignedMembership",
    "sign_membership",
    "verify_membership",
    "rotate_membership",
]

CONTEXT = b"fedod-membership/1\x00"
RawKey = Annotated[B64, Field(min_length=44, max_length=44)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MembershipBody(_Model):
    """The certified cohort of one study (what the consortium key signs)."""

    study_id: StudyId
    version: int = Field(strict=True, ge=1, le=2**62)
    expires_at: AwareDatetime
    cohort_size: int = Field(strict=True, ge=2, le=1000)
    max_dropouts: int = Field(strict=True, ge=0, le=1000)
    max_colluders: int = Field(strict=True, ge=0, le=1000)
    members: dict[Name, RawKey] = Field(
        description="Participant name -> raw Ed25519 identity public key (base64, 32 bytes)."
    )


class SignedMembership(_Model):
    """A membership certificate: canonical JSON payload + base64 Ed25519 signature."""

    payload: str = Field(max_length=200_000)
    signature: B64 = Field(min_length=88, max_length=88)

    def digest(self) -> str:
        return hashlib.sha256(self.payload.encode("utf-8")).hexdigest()

    def body(self) -> MembershipBody:
        """The payload parsed, signature NOT checked (for display and for the coordinator)."""
        try:
            return MembershipBody.model_validate_json(self.payload)
        except ValidationError as exc:
            raise RoundRefused(f"membership certificate: malformed body: {exc}") from exc


def sign_membership(body: MembershipBody, key: Ed25519PrivateKey) -> SignedMembership:
    payload = canonical_json(body)
    return SignedMembership(
        payload=payload.decode("utf-8"), signature=b64e(key.sign(CONTEXT + payload))
    )


def verify_membership(
    signed: SignedMembership,
    consortium_key: Ed25519PublicKey,
    *,
    study: str,
    params: AggregationParams,
    now: datetime,
) -> MembershipBody:
    """The certificate's body, refused (:class:`RoundRefused`) unless it is signed by the
    pinned consortium key, names ``study``, has not expired at ``now``, certifies exactly the
    cohort parameters of the signed config and lists exactly ``cohort_size`` distinct keys."""
    try:
        consortium_key.verify(b64d(signed.signature), CONTEXT + signed.payload.encode("utf-8"))
    except InvalidSignature as exc:
        raise RoundRefused(
            "membership certificate is not signed by the consortium key pinned at enrolment: "
            "ask your data-protection officer for the certificate of this study (or re-enrol "
            "with the right --consortium-key)"
        ) from exc
    body = signed.body()
    if body.study_id != study:
        raise RoundRefused(
            f"membership certificate is for study {body.study_id!r}, not {study!r}"
        )
    if now >= body.expires_at:
        raise RoundRefused(
            f"membership certificate v{body.version} expired at {body.expires_at.isoformat()}: "
            "ask your data-protection officer to sign a new one"
        )
    certified = (body.cohort_size, body.max_dropouts, body.max_colluders)
    config = (params.cohort_size, params.max_dropouts, params.max_colluders)
    if certified != config:
        raise RoundRefused(
            f"membership certifies cohort (n, D, T) = {certified}, the signed config asks "
            f"{config}: the coordinator changed the cohort parameters without the consortium"
        )
    if len(body.members) != body.cohort_size:
        raise RoundRefused(
            f"membership lists {len(body.members)} members, it must list exactly "
            f"n = {body.cohort_size}"
        )
    keys = list(body.members.values())
    if len(set(keys)) != len(keys):
        raise RoundRefused("membership certificate lists one identity key twice")
    return body


def rotate_membership(signed: SignedMembership, key: Ed25519PrivateKey, *, member: str,
                      identity_key: str, expires_at: datetime) -> SignedMembership:
    """The next version of ``signed`` (which ``key`` must have signed) with ``member``'s
    identity key replaced by ``identity_key``: rotation, and revocation of a compromised key
    (a member that verified the new version refuses every older one, so the old key stops
    for it at once: ``participant.secagg.checks.certified_members``)."""
    try:
        key.public_key().verify(b64d(signed.signature), CONTEXT + signed.payload.encode())
    except InvalidSignature as exc:
        raise RoundRefused("the certificate to rotate is not signed by this consortium key"
                           ) from exc
    body = signed.body()
    if member not in body.members:
        raise RoundRefused(f"{member!r} is not a member of this certificate")
    if identity_key in body.members.values():
        raise RoundRefused("that identity key is already certified: give the member's new key")
    return sign_membership(body.model_copy(update={
        "version": body.version + 1, "expires_at": expires_at,
        "members": {**body.members, member: identity_key}}), key)
