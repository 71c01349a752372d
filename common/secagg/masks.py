"""Pairwise and self masks: X25519 + HKDF seeds, ChaCha20 keystreams, arithmetic mod ``2**k``.

Participant u sends ``y_u = x_u + PRG(b_u) + sum_{v > u} PRG(s_uv) - sum_{v < u} PRG(s_uv)``
(mod ``2**k``, members ordered by name), Bonawitz et al., "Practical Secure Aggregation for
Privacy-Preserving Machine Learning", CCS 2017. ``s_uv`` comes from X25519 and HKDF-SHA256 with
salt = the round id and info binding both identity keys, so both ends derive the same seed and
nobody else can. PRG = ChaCha20 keystream (``cryptography``) encrypting zeros, read as
little-endian 64-bit unsigned words reduced mod ``2**k`` (k <= 64 divides 64, so every word is
uniform). No numpy generator is involved: Flower's SecAgg+ seeds numpy's ``RandomState`` from
32 bits, which a brute force over 2**32 seeds undoes.
"""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from numpy.typing import NDArray

__all__ = [
    "pair_seed",
    "keystream_words",
    "apply_masks",
    "to_words",
    "from_words",
    "pack_words",
    "unpack_words",
]

U64 = NDArray[np.uint64]
_NONCE = bytes(16)  # every key is used for exactly one keystream


def _word_mask(k: int) -> np.uint64:
    if not 8 <= k <= 64 or k % 8:
        raise ValueError(f"word size k must be a multiple of 8 in [8, 64], got {k}")
    return np.uint64((1 << k) - 1)


def hkdf(material: bytes, *, salt: bytes, info: bytes, length: int = 32) -> bytes:
    """HKDF-SHA256 (RFC 5869)."""
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(material)


def pair_seed(
    mine: X25519PrivateKey,
    peer: X25519PublicKey,
    *,
    round_id: str,
    purpose: bytes,
    my_identity: bytes,
    peer_identity: bytes,
) -> bytes:
    """32-byte seed shared by two members for this round (same result at both ends)."""
    lo, hi = sorted([my_identity, peer_identity])
    info = b"fedod-secagg/" + purpose + b"/1\x00" + lo + hi
    return hkdf(mine.exchange(peer), salt=round_id.encode("utf-8"), info=info)


def keystream_words(seed: bytes, n: int, k: int) -> U64:
    """``n`` uniform words mod ``2**k`` from the ChaCha20 keystream keyed by ``seed``."""
    mask = _word_mask(k)
    if len(seed) != 32:
        raise ValueError("a mask seed is 32 bytes")
    encryptor = Cipher(algorithms.ChaCha20(seed, _NONCE), mode=None).encryptor()
    stream = encryptor.update(bytes(8 * n))
    return np.frombuffer(stream, dtype="<u8").astype(np.uint64) & mask


def to_words(values: NDArray[np.int64], k: int) -> U64:
    """Signed integers to words mod ``2**k`` (two's complement)."""
    return values.astype(np.int64).view(np.uint64) & _word_mask(k)


def from_words(words: U64, k: int) -> NDArray[np.int64]:
    """Words mod ``2**k`` back to signed integers in ``[-2**(k-1), 2**(k-1))``."""
    mask = _word_mask(k)
    w = words & mask
    if k == 64:
        return w.view(np.int64).copy()
    half = np.uint64(1 << (k - 1))
    signed = w.astype(np.int64)
    return np.where(w >= half, signed - np.int64(1 << k), signed).astype(np.int64)


def apply_masks(words: U64, self_seed: bytes, pair_seeds: list[tuple[int, bytes]], k: int) -> U64:
    """``words + PRG(self_seed) + sum(sign * PRG(seed))`` mod ``2**k``; sign is +1 or -1."""
    mask = _word_mask(k)
    n = words.shape[0]
    out = (words + keystream_words(self_seed, n, k)) & mask
    for sign, seed in pair_seeds:
        stream = keystream_words(seed, n, k)
        out = (out + stream) & mask if sign > 0 else (out - stream) & mask
    return out


def pack_words(words: U64, k: int) -> bytes:
    """k/8 little-endian bytes per word (masked words are uniform: nothing to compress)."""
    _word_mask(k)
    width = k // 8
    raw = words.astype("<u8").view(np.uint8).reshape(-1, 8)
    return raw[:, :width].tobytes()


def unpack_words(data: bytes, n: int, k: int) -> U64:
    """Inverse of :func:`pack_words`; ValueError unless ``data`` holds exactly ``n`` words."""
    _word_mask(k)
    width = k // 8
    if len(data) != n * width:
        raise ValueError(f"expected {n * width} bytes of masked words, got {len(data)}")
    raw = np.zeros((n, 8), dtype=np.uint8)
    raw[:, :width] = np.frombuffer(data, dtype=np.uint8).reshape(n, width)
    return raw.reshape(-1).view("<u8").astype(np.uint64)
