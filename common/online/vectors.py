"""Vectors as text: base64 of float64 little-endian (the wire format and the stream file)."""

from __future__ import annotations

import base64

import numpy as np
from numpy.typing import NDArray

__all__ = ["decode_vector", "encode_vector"]


def encode_vector(v: NDArray[np.floating]) -> str:
    """base64 of the float64 little-endian bytes of ``v``."""
    return base64.b64encode(np.asarray(v, dtype="<f8").tobytes()).decode("ascii")


def decode_vector(text: str, dim: int) -> NDArray[np.float64]:
    """Inverse of :func:`encode_vector`; refuses a wrong length or a non-finite value."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as exc:
        raise ValueError(f"vector is not valid base64: {exc}") from exc
    if len(raw) != 8 * dim:
        raise ValueError(f"vector must hold {dim} float64 values ({8 * dim} bytes), "
                         f"got {len(raw)} bytes")
    v = np.frombuffer(raw, dtype="<f8").astype(np.float64)
    if not np.all(np.isfinite(v)):
        raise ValueError("vector values must be finite")
    return v
