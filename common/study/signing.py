"""Ed25519 signatures over study configs, key fingerprints and key files.

The coordinator signs the canonical JSON of a :class:`~common.study.config.StudyConfig`; the
signature covers ``SIGNING_CONTEXT + payload bytes``. Participants pin the coordinator's key
fingerprint at enrolment and accept a config only through :func:`verify_config`, which refuses
a bad signature or foreign key, an expired config, a version older than one already seen, and
an LSH digest that does not match the hash functions re-derived from the seed
(docs/TRUST.md: who holds which key).
"""

from __future__ import annotations

import base64
import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from common.errors import ConfigDowngrade, ConfigExpired, SignatureInvalid
from common.study.canonical import parse_canonical
from common.study.config import StudyConfig, canonical_json

__all__ = [
    "SIGNING_CONTEXT",
    "SignedConfig",
    "sign_config",
    "verify_config",
    "key_fingerprint",
    "generate_key",
    "load_private_key",
    "save_private_key",
    "public_key_from_pem",
    "public_key_pem",
]

SIGNING_CONTEXT = b"fedod-config/1\x00"


class SignedConfig(BaseModel):
    """A study config as the coordinator serves it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    payload: str = Field(max_length=4_000_000, description="Canonical JSON of the StudyConfig.")
    signature: str = Field(
        pattern=r"^[A-Za-z0-9+/]{86}==$", description="Base64 Ed25519 signature."
    )
    key_id: str = Field(
        pattern=r"^sha256:[0-9a-f]{64}$", description="Fingerprint of the signing key."
    )

    def digest(self) -> str:
        """Hex SHA-256 of the payload bytes: the config digest a contribution names."""
        return hashlib.sha256(self.payload.encode("utf-8")).hexdigest()


def key_fingerprint(public_key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """``"sha256:<hex>"`` of the raw 32-byte public key."""
    if isinstance(public_key, Ed25519PrivateKey):
        public_key = public_key.public_key()
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def sign_config(config: StudyConfig, private_key: Ed25519PrivateKey) -> SignedConfig:
    """Sign the canonical JSON of ``config``; refuses a config whose LSH digest is wrong."""
    if config.lsh_family().digest() != config.lsh.digest:
        raise ValueError("lsh.digest does not match the family derived from lsh.seed")
    payload = canonical_json(config)
    signature = private_key.sign(SIGNING_CONTEXT + payload)
    return SignedConfig(
        payload=payload.decode("utf-8"),
        signature=base64.b64encode(signature).decode("ascii"),
        key_id=key_fingerprint(private_key),
    )


def verify_config(
    signed: SignedConfig,
    public_key: Ed25519PublicKey,
    *,
    newest_seen: int | None = None,
    now: datetime | None = None,
) -> StudyConfig:
    """Return the config only if it can be trusted.

    Raises
    ------
    SignatureInvalid
        Wrong key, bad signature, a payload that is not a valid canonical config, or an
        ``lsh.digest`` that does not match the functions re-derived from ``lsh.seed`` (the
        coordinator and this participant would hash differently).
    ConfigExpired
        ``now >= expires_at``.
    ConfigDowngrade
        ``version < newest_seen``.
    """
    pinned = key_fingerprint(public_key)
    if signed.key_id != pinned:
        raise SignatureInvalid(
            f"config signed by key {signed.key_id}, but the pinned coordinator key is "
            f"{pinned}; re-enrol if the coordinator rotated its key",
            key_id=signed.key_id,
        )
    payload = signed.payload.encode("utf-8")
    try:
        public_key.verify(
            base64.b64decode(signed.signature, validate=True), SIGNING_CONTEXT + payload
        )
    except (InvalidSignature, ValueError) as exc:
        raise SignatureInvalid(
            "config signature does not verify under the pinned coordinator key; "
            "the config was altered in transit or not issued by this coordinator"
        ) from exc
    try:
        config = parse_canonical(StudyConfig, payload)
    except ValidationError as exc:
        raise SignatureInvalid(f"signed config is not a valid study config: {exc}") from exc
    if canonical_json(config) != payload:
        raise SignatureInvalid("signed config payload is not in canonical form")
    now = now or datetime.now(UTC)
    if now >= config.expires_at:
        raise ConfigExpired(
            f"config {config.study_id} v{config.version} expired at "
            f"{config.expires_at.isoformat()}; fetch a fresh config from the coordinator",
            version=config.version,
        )
    if newest_seen is not None and config.version < newest_seen:
        raise ConfigDowngrade(
            f"config {config.study_id} v{config.version} is older than v{newest_seen} "
            "already seen; refusing a downgrade (possible replay)",
            version=config.version,
            newest_seen=newest_seen,
        )
    if config.lsh_family().digest() != config.lsh.digest:
        raise SignatureInvalid(
            "lsh.digest does not match the hash functions derived here from lsh.seed; "
            "coordinator and participant run incompatible fedod versions",
            kind="lsh_digest",
        )
    return config


def generate_key() -> Ed25519PrivateKey:
    """A new Ed25519 signing key."""
    return Ed25519PrivateKey.generate()


def save_private_key(key: Ed25519PrivateKey, path: str | os.PathLike[str]) -> None:
    """Write ``key`` as unencrypted PKCS#8 PEM, readable by the owner only (mode 0600)."""
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, pem)
    finally:
        os.close(fd)


def load_private_key(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    """Read a PEM Ed25519 private key written by :func:`save_private_key`."""
    key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} does not hold an Ed25519 private key")
    return key


def public_key_pem(key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """SubjectPublicKeyInfo PEM of the public key."""
    if isinstance(key, Ed25519PrivateKey):
        key = key.public_key()
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode("ascii")


def public_key_from_pem(pem: str | bytes) -> Ed25519PublicKey:
    """Parse a PEM public key; ``ValueError`` unless it is Ed25519."""
    data = pem.encode("ascii") if isinstance(pem, str) else pem
    key = serialization.load_pem_public_key(data)
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("the coordinator key must be an Ed25519 public key")
    return key
