"""A member's per-attempt secrets and the keys that seal seed shares between two members."""

from __future__ import annotations

import os
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from common.secagg.masks import SELF_SEED_BYTES, pair_seed
from common.secagg.messages import AdvertBody, b64d

__all__ = ["RoundSecrets", "raw_public", "share_key", "share_aad", "ack_key"]

_RAW = serialization.Encoding.Raw
_PUB = serialization.PublicFormat.Raw


def raw_public(key: Ed25519PrivateKey | X25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(_RAW, _PUB)


@dataclass(frozen=True)
class RoundSecrets:
    """One attempt's secrets: an X25519 key and the 16-byte self-mask seed b_u.

    One X25519 key serves both the pairwise mask seeds and the keys sealing seed shares
    (separate HKDF labels). Bonawitz et al. keep two keys because their server reconstructs a
    dropped user's mask key, which must not also open its shares; here no X25519 key is ever
    reconstructed (a member lost before masking restarts the round with fresh keys; one lost
    after masking has only b_u recovered), so one key per attempt is enough.
    """

    round_key: X25519PrivateKey
    self_seed: bytes

    @classmethod
    def generate(cls) -> RoundSecrets:
        return cls(X25519PrivateKey.generate(), os.urandom(SELF_SEED_BYTES))

    def to_bytes(self) -> bytes:
        """48 raw bytes for the participant's (0600) state file; an attempt's keys must
        survive a restart so the participant can still unmask the vector it sent."""
        raw = serialization.PrivateFormat.Raw
        none = serialization.NoEncryption()
        return self.round_key.private_bytes(_RAW, raw, none) + self.self_seed

    @classmethod
    def from_bytes(cls, data: bytes) -> RoundSecrets:
        if len(data) != 32 + SELF_SEED_BYTES:
            raise ValueError(f"round secrets are {32 + SELF_SEED_BYTES} bytes")
        return cls(X25519PrivateKey.from_private_bytes(data[:32]), data[32:])


def _pair_key(mine: X25519PrivateKey, peer: AdvertBody, me: AdvertBody, round_id: str,
              roster_digest: str, purpose: bytes, length: int) -> bytes:
    return pair_seed(
        mine,
        X25519PublicKey.from_public_bytes(b64d(peer.round_key, size=32)),
        round_id=round_id,
        roster_digest=roster_digest,
        purpose=purpose,
        my_identity=b64d(me.identity_key),
        peer_identity=b64d(peer.identity_key),
        length=length,
    )


def share_key(mine: X25519PrivateKey, peer: AdvertBody, me: AdvertBody, round_id: str,
              roster_digest: str) -> bytes:
    """AES-256-SIV key sealing seed shares between two members for this attempt and roster."""
    return _pair_key(mine, peer, me, round_id, roster_digest, b"share", 64)


def ack_key(mine: X25519PrivateKey, peer: AdvertBody, me: AdvertBody, round_id: str,
            roster_digest: str) -> bytes:
    """HMAC key of the two members' roster acknowledgements (common.secagg.wire.ack_tag)."""
    return _pair_key(mine, peer, me, round_id, roster_digest, b"ack", 32)


def share_aad(round_id: str, owner: str, holder: str, roster_digest: str) -> bytes:
    """Binds round, owner, holder and the roster the share was made under: a holder shown
    another roster (a split view) cannot open it."""
    return (f"fedod-secagg/share/2\x00{round_id}\x00{owner}\x00{holder}\x00".encode()
            + bytes.fromhex(roster_digest))
