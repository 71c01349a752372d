"""Threshold shares of a 32-byte self-mask seed, and their encryption for one peer.

Shamir secret sharing over GF(2^128) from PyCryptodome (``Crypto.Protocol.SecretSharing``,
16-byte secrets, as Flower uses): the seed is split into two 16-byte halves, each shared with
the same indices. A share travels to its holder through the coordinator, encrypted with
ChaCha20-Poly1305 under a key from X25519 + HKDF between the two members' per-round
encryption keys; the associated data binds round, sender and recipient, so a share cannot be
replayed into another round or to another holder.
"""

from __future__ import annotations

import os

from Crypto.Protocol.SecretSharing import Shamir
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

__all__ = ["split_seed", "combine_seed", "seal_share", "open_share", "ShareOpenError"]

SHARE_BYTES = 1 + 32


class ShareOpenError(ValueError):
    """A share did not decrypt or authenticate."""


def split_seed(seed: bytes, threshold: int, holders: int) -> list[bytes]:
    """``holders`` shares (index byte + 32 bytes), any ``threshold`` of which give ``seed``."""
    if len(seed) != 32:
        raise ValueError("seed must be 32 bytes")
    if not 1 <= threshold <= holders <= 255:
        raise ValueError(f"need 1 <= threshold ({threshold}) <= holders ({holders}) <= 255")
    if threshold == 1:  # Shamir needs k >= 2; a 1-of-n share is the seed itself
        return [bytes([i + 1]) + seed for i in range(holders)]
    lo = Shamir.split(threshold, holders, seed[:16], ssss=False)
    hi = Shamir.split(threshold, holders, seed[16:], ssss=False)
    return [bytes([i]) + a + b for (i, a), (j, b) in zip(lo, hi, strict=True) if i == j]


def combine_seed(shares: list[bytes], threshold: int) -> bytes:
    """The seed from ``threshold`` or more distinct shares (ValueError if fewer)."""
    by_index = {s[0]: s for s in shares if len(s) == SHARE_BYTES}
    if len(by_index) < threshold:
        raise ValueError(f"{len(by_index)} distinct shares, {threshold} needed")
    chosen = [by_index[i] for i in sorted(by_index)[:threshold]]
    if threshold == 1:
        return chosen[0][1:]
    lo = Shamir.combine([(s[0], s[1:17]) for s in chosen], ssss=False)
    hi = Shamir.combine([(s[0], s[17:33]) for s in chosen], ssss=False)
    return bytes(lo) + bytes(hi)


def seal_share(key: bytes, share: bytes, aad: bytes) -> bytes:
    """nonce || ChaCha20-Poly1305(share) under a fresh random nonce."""
    nonce = os.urandom(12)
    return nonce + ChaCha20Poly1305(key).encrypt(nonce, share, aad)


def open_share(key: bytes, sealed: bytes, aad: bytes) -> bytes:
    try:
        return ChaCha20Poly1305(key).decrypt(sealed[:12], sealed[12:], aad)
    except (InvalidTag, ValueError) as exc:
        raise ShareOpenError("share does not authenticate for this round and holder") from exc
