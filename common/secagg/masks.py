"""Pairwise and self masks: X25519 + HKDF seeds, ChaCha20 keystreams, arithmetic mod ``2**k``.

Participant u sends ``y_u = x_u + PRG(b_u) + sum_{v > u} PRG(s_uv) - sum_{v < u} PRG(s_uv)``
(mod ``2**k``, members ordered by name), Bonawitz et al., "Practical Secure Aggregation for
Privacy-Preserving Machine Learning", CCS 2017. ``s_uv`` comes from X25519 and HKDF-SHA256 with
salt = the round id (study, round, attempt) and info binding both identity keys and the digest
of the roster the member masks under, so both ends derive the same seed only when they hold the
same roster, and nobody else can. PRG = ChaCha20 keystream (``cryptography``) encrypting zeros,
read as little-endian 64-bit unsigned words reduced mod ``2**k`` (``2**k`` divides ``2**64``,
so every word is uniform). The self-mask seed b_u is 16 bytes (one Shamir chunk) and keys
ChaCha20 through HKDF. Masked words travel packed to exactly k bits each: they are uniform, so
this is as small as they get. No numpy generator is involved: Flower's SecAgg+ seeds numpy's
``RandomState`` from 32 bits, which a brute force over 2**32 seeds undoes.

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
    "self_mask_key",
    "SELF_SEED_BYTES",
]

SELF_SEED_BYTES = 16

U64 = NDArray[np.uint64]
_NONCE = bytes(16)  # every key is used for exactly one keystream


def _word_mask(k: int) -> np.uint64:
    if not 2 <= k <= 64:
        raise ValueError(f"word size k must be in [2, 64], got {k}")
    return np.uint64((1 << k) - 1)


def hkdf(material: bytes, *, salt: bytes, info: bytes, length: int = 32) -> bytes:
    """HKDF-SHA256 (RFC 5869)."""
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(material)


def pair_seed(
    mine: X25519PrivateKey,
    peer: X25519PublicKey,
    *,
    round_id: str,
    roster_digest: str,
    purpose: bytes,
    my_identity: bytes,
    peer_identity: bytes,
    length: int = 32,
) -> bytes:
    """A key shared by two members for ``purpose`` under one view: study, round and attempt
    (``round_id``, the HKDF salt) and the roster both hold (``roster_digest``, in the info).
    Two members shown different rosters derive unrelated keys, so their masks never cancel:
    a split view yields noise, never a sum."""
    lo, hi = sorted([my_identity, peer_identity])
    info = b"fedod-secagg/" + purpose + b"/2\x00" + lo + hi + bytes.fromhex(roster_digest)
    return hkdf(mine.exchange(peer), salt=round_id.encode("utf-8"), info=info, length=length)


def self_mask_key(self_seed: bytes) -> bytes:
    """The 32-byte ChaCha20 key of the self mask PRG(b_u), from the 16-byte seed b_u."""
    if len(self_seed) != SELF_SEED_BYTES:
        raise ValueError(f"a self-mask seed is {SELF_SEED_BYTES} bytes")
    return hkdf(self_seed, salt=b"", info=b"fedod-secagg/self-mask/1")


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
    negative = (w >> np.uint64(k - 1)) & np.uint64(1) == 1
    return np.where(negative, w | ~mask, w).view(np.int64).copy()  # sign-extend


def apply_masks(words: U64, self_seed: bytes, pair_seeds: list[tuple[int, bytes]], k: int) -> U64:
    """``words + PRG(self_seed) + sum(sign * PRG(seed))`` mod ``2**k``; sign is +1 or -1."""
    mask = _word_mask(k)
    n = words.shape[0]
    out = (words + keystream_words(self_mask_key(self_seed), n, k)) & mask
    for sign, seed in pair_seeds:
        stream = keystream_words(seed, n, k)
        out = (out + stream) & mask if sign > 0 else (out - stream) & mask
    return out


def pack_words(words: U64, k: int) -> bytes:
    """Exactly k bits per word, little-endian bit order, the last byte zero-padded."""
    _word_mask(k)
    bits = np.unpackbits(words.astype("<u8").view(np.uint8).reshape(-1, 8), axis=1,
                         bitorder="little")
    return np.packbits(bits[:, :k].reshape(-1), bitorder="little").tobytes()


def unpack_words(data: bytes, n: int, k: int) -> U64:
    """Inverse of :func:`pack_words`; ValueError unless ``data`` is exactly ``n`` packed words
    (``ceil(n * k / 8)`` bytes, padding bits zero: one encoding per vector)."""
    _word_mask(k)
    size = -(-n * k // 8)
    if len(data) != size:
        raise ValueError(f"expected {size} bytes of masked words, got {len(data)}")
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
    if bits[n * k :].any():
        raise ValueError("masked words: non-zero padding bits")
    full = np.zeros((n, 64), dtype=np.uint8)
    full[:, :k] = bits[: n * k].reshape(n, k)
    return np.packbits(full, axis=1, bitorder="little").view("<u8").reshape(-1).astype(np.uint64)
