"""Proof of possession of a participant's long-term identity key (docs/TRUST.md).

A participant registers its Ed25519 identity key with a signature, made with that key, over a
context naming the coordinator (the fingerprint of its signing key, which the participant
pinned at enrolment), the participant and the key itself. Nobody can register a key it does
not hold, so "this key is registered to someone else" (409) is only ever seen by the key's
holder (registering it under a second name), never by a participant probing for keys.
"""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from common.errors import InvalidInput, SignatureInvalid
from common.secagg.keys import raw_public
from common.secagg.messages import b64d, b64e

__all__ = ["identity_proof_message", "sign_identity_proof", "verify_identity_proof"]

CONTEXT = b"fedod-secagg/identity-key/1"


def identity_proof_message(coordinator_key_id: str, participant: str, public_key: bytes) -> bytes:
    """The bytes an identity key signs to prove it is held by ``participant``."""
    return b"\x00".join((CONTEXT, coordinator_key_id.encode(), participant.encode(), public_key))


def sign_identity_proof(key: Ed25519PrivateKey, coordinator_key_id: str, participant: str) -> str:
    """Base64 Ed25519 signature of :func:`identity_proof_message` by ``key``."""
    message = identity_proof_message(coordinator_key_id, participant, raw_public(key))
    return b64e(key.sign(message))


def verify_identity_proof(public_key: str, proof: str, coordinator_key_id: str,
                          participant: str) -> None:
    """Raise ``InvalidInput`` (422) unless ``proof`` is the key's signature of the context."""
    raw = b64d(public_key, size=32)
    try:
        key = Ed25519PublicKey.from_public_bytes(raw)
        key.verify(b64d(proof, size=64),
                   identity_proof_message(coordinator_key_id, participant, raw))
    except (ValueError, InvalidSignature, SignatureInvalid) as exc:
        raise InvalidInput(
            "proof does not verify: it must be the identity key's Ed25519 signature over "
            f"the registration context for participant {participant!r} at coordinator "
            f"{coordinator_key_id} (only the key's holder can register it)",
            participant=participant) from exc
