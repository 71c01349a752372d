"""Threshold shares of a 16-byte self-mask seed, and their encryption for one peer.

Shamir secret sharing over GF(2^128) from PyCryptodome (``Crypto.Protocol.SecretSharing``,
16-byte secrets, as Flower uses): the seed is one 16-byte chunk, so a share is 16 bytes at an
index (an int: the field holds far more than the 1,000 members a cohort may have). The index is
the holder's roster position + 1, which both ends know, so only the 16 bytes travel (32 bytes
sealed). A share travels to its holder through the coordinator,
encrypted with AES-SIV (RFC 5297, deterministic authenticated encryption: no nonce on the
wire, and a repeated encryption can only repeat the same ciphertext) under a key from X25519 +
HKDF between the two members' per-round keys; the associated data binds round, sender and
recipient, so a share cannot be replayed into another round or to another holder.
"""

from __future__ import annotations

from Crypto.Protocol.SecretSharing import Shamir
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESSIV

from common.secagg.masks import SELF_SEED_BYTES

__all__ = [
    "MAX_HOLDERS", "split_seed", "combine_seed", "seal_share", "open_share", "ShareOpenError",
]

MAX_HOLDERS = 1000
"""The largest cohort a config allows (``AggregationParams.cohort_size``); Shamir here works
for any number of holders below 2**128, this bound only refuses nonsense early."""


class ShareOpenError(ValueError):
    """A share did not decrypt or authenticate."""


def split_seed(seed: bytes, threshold: int, holders: int) -> list[bytes]:
    """``holders`` shares of 16 bytes, share ``i`` at index ``i + 1``; any ``threshold`` of
    them give ``seed``."""
    if len(seed) != SELF_SEED_BYTES:
        raise ValueError(f"seed must be {SELF_SEED_BYTES} bytes")
    if not 1 <= threshold <= holders <= MAX_HOLDERS:
        raise ValueError(
            f"need 1 <= threshold ({threshold}) <= holders ({holders}) <= {MAX_HOLDERS}")
    if threshold == 1:  # Shamir needs k >= 2; a 1-of-n share is the seed itself
        return [seed] * holders
    return [bytes(share) for _, share in sorted(Shamir.split(threshold, holders, seed,
                                                              ssss=False))]


def combine_seed(shares: dict[int, bytes], threshold: int) -> bytes:
    """The seed from ``threshold`` or more shares, by index (ValueError if fewer valid ones)."""
    valid = {i: s for i, s in shares.items()
             if 1 <= i <= MAX_HOLDERS and len(s) == SELF_SEED_BYTES}
    if len(valid) < threshold:
        raise ValueError(f"{len(valid)} distinct shares, {threshold} needed")
    chosen = sorted(valid.items())[:threshold]
    if threshold == 1:
        return chosen[0][1]
    return bytes(Shamir.combine(chosen, ssss=False))


def seal_share(key: bytes, share: bytes, aad: bytes) -> bytes:
    """AES-SIV(share) with ``aad`` bound: 16-byte synthetic IV + ciphertext (32 bytes for the
    16 bytes of a share without its index)."""
    return AESSIV(key).encrypt(share, [aad])


def open_share(key: bytes, sealed: bytes, aad: bytes) -> bytes:
    try:
        return AESSIV(key).decrypt(sealed, [aad])
    except (InvalidTag, ValueError) as exc:
        raise ShareOpenError("share does not authenticate for this round and holder") from exc
