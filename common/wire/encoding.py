"""Wire encoding of integer count vectors: base64 of zlib-compressed little-endian arrays.

Dense vectors send every cell; sparse ones (a thresholded grid) send the sorted cell keys
followed by the values. A key is ``W = key_words(n_cells)`` ``<i8`` words, most significant
first (:mod:`common.histograms.cellkeys`): for grids of at most ``2**63`` cells ``W = 1`` and a key
is the plain ``<i8`` cell index, so the format of small grids is unchanged; wider grids (up to
``2**8064`` cells, e.g. 4 bins over 784 features) just have longer keys. The SHA-256
digest covers the *decompressed* bytes. Decoding is defensive: it bounds the base64 text
and the decompressed size before doing any work (no zip bombs; :mod:`common.wire.inflate`), and
every failure is a :class:`~common.errors.PayloadInvalid` that says what is wrong.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import zlib
from typing import TYPE_CHECKING, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from pydantic import BaseModel, ConfigDict, Field, field_validator

from common.errors import PayloadInvalid, PayloadTooLarge, ReleaseOutOfBounds
from common.histograms.cellkeys import MAX_KEY_BITS, as_keys, key_words, keys_problem
from common.wire.inflate import inflate_exactly

if TYPE_CHECKING:
    from common.histograms.release import Release

__all__ = [
    "FORMAT",
    "DEFAULT_MAX_BYTES",
    "EncodedCounts",
    "encode_counts",
    "decode_counts",
    "check_counts",
    "validated_json",
    "encode_release",
    "to_dense",
]

FORMAT: Literal["fedod-counts/1"] = "fedod-counts/1"
DEFAULT_MAX_BYTES = 64 * 2**20
"""Default bound on the decompressed size of one vector (64 MiB)."""
MAX_CELLS = 2**62
"""Largest dense vector; sparse vectors may name up to ``2**MAX_KEY_BITS`` cells."""
_INDEX_DTYPE = np.dtype("<i8")
_DTYPES: dict[str, np.dtype[np.signedinteger]] = {"<i4": np.dtype("<i4"), "<i8": np.dtype("<i8")}
_I32 = np.iinfo(np.int32)
_MAX_CELLS_ANY = 2**MAX_KEY_BITS  # computed once: validation runs on every request


class EncodedCounts(BaseModel):
    """A count vector on the wire (a participant's release or the merged model)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    format: Literal["fedod-counts/1"] = Field(
        default=FORMAT, description="Encoding format and version."
    )
    layout: Literal["dense", "sparse"] = Field(
        description="`dense`: every cell in order; `sparse`: sorted cell indices then values."
    )
    n_cells: int = Field(
        ge=1,
        description="Number of cells of the full vector (dense: at most 2**62). Sparse keys "
        "have ceil(bit_length(n_cells - 1) / 63) words (at least 1).",
    )
    dtype: Literal["<i4", "<i8"] = Field(
        description="Little-endian integer type of the values (indices are always `<i8`)."
    )
    nnz: int | None = Field(
        default=None,
        ge=0,
        le=2**62,
        description="Number of (key, value) pairs; required for `sparse`, absent for `dense`.",
    )
    data: str = Field(
        description="Standard base64 of zlib-compressed bytes: values (dense) or "
        "the keys (nnz rows of W `<i8` words, most significant first) followed by the "
        "values (sparse)."
    )
    sha256: str = Field(
        pattern=r"^[0-9a-f]{64}$", description="Hex SHA-256 of the decompressed bytes."
    )


    @field_validator("n_cells")
    @classmethod
    def _key_width(cls, v: int) -> int:
        if v > _MAX_CELLS_ANY:
            raise ValueError(f"n_cells must be at most 2**{MAX_KEY_BITS}")
        return v


def _payload_len(layout: str, dtype: np.dtype[np.signedinteger], n_cells: int, nnz: int) -> int:
    if layout == "dense":
        return n_cells * dtype.itemsize
    return nnz * (8 * key_words(n_cells) + dtype.itemsize)


def encode_counts(
    values: ArrayLike, *, indices: ArrayLike | None = None, n_cells: int, level: int = 9
) -> EncodedCounts:
    """Encode integer counts; dense when ``indices`` is None, else sparse.

    ``level`` is the zlib level: 9 for a release (encoded once), lower for a model that is
    re-encoded at every version (the coordinator uses 1).

    ``indices`` are cell keys ``(nnz, W)`` (or, for ``W = 1``, a 1-d index array). Uses
    ``<i4`` for the values when every value fits, else ``<i8``.

    Raises
    ------
    ValueError
        If the values are not integers, a dense vector is not ``n_cells`` long, or sparse
        keys are not strictly increasing within ``[0, n_cells)``.
    """
    vals = np.asarray(values)
    if vals.ndim != 1 or vals.dtype.kind not in "iu":
        raise ValueError(f"values must be a 1-d integer array, got {vals.dtype} {vals.shape}")
    vals = vals.astype(np.int64)
    fits32 = vals.size == 0 or (int(vals.min()) >= _I32.min and int(vals.max()) <= _I32.max)
    dtype_name: Literal["<i4", "<i8"] = "<i4" if fits32 else "<i8"
    body = vals.astype(_DTYPES[dtype_name]).tobytes()
    if indices is None:
        if vals.size != n_cells:
            raise ValueError(f"dense vector has {vals.size} cells, expected {n_cells}")
        layout: Literal["dense", "sparse"] = "dense"
        nnz = None
    else:
        idx = as_keys(indices, key_words(n_cells)) if np.size(indices) else np.empty(
            (0, key_words(n_cells)), dtype=np.int64)
        if idx.shape[0] != vals.size:
            raise ValueError("indices must be an integer array of the same length as values")
        problem = keys_problem(idx, n_cells)
        if problem:
            raise ValueError(problem)
        body = idx.astype(_INDEX_DTYPE).tobytes() + body
        layout, nnz = "sparse", int(idx.shape[0])
    return EncodedCounts(
        layout=layout,
        n_cells=n_cells,
        dtype=dtype_name,
        nnz=nnz,
        data=base64.b64encode(zlib.compress(body, level)).decode("ascii"),
        sha256=hashlib.sha256(body).hexdigest(),
    )


def decode_counts(
    enc: EncodedCounts,
    *,
    expected_cells: int,
    max_abs: int = 2**40,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> tuple[NDArray[np.int64] | None, NDArray[np.int64]]:
    """Decode and fully validate counts; return ``(keys or None, values)`` as int64.

    Sparse keys come back as an ``(nnz, W)`` array (``W = key_words(n_cells)``, also for 1).
    Parameters and errors as :func:`check_counts`.
    """
    indices, values = _validated(enc, expected_cells, max_abs, max_bytes)
    return indices, values.astype(np.int64)


def check_counts(
    enc: EncodedCounts,
    *,
    expected_cells: int,
    max_abs: int = 2**40,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> None:
    """Validate counts fully without keeping them (the coordinator's ingest: the counts are
    decoded again when the model is read).

    Parameters
    ----------
    enc : EncodedCounts
    expected_cells : int
        The vector length the study config implies; ``enc.n_cells`` must equal it.
    max_abs : int
        Every value must lie in ``[-max_abs, max_abs]``.
    max_bytes : int
        Bound on the decompressed size; the base64 text is bounded accordingly.

    Raises
    ------
    PayloadTooLarge
        If the declared or encoded size is over ``max_bytes``.
    PayloadInvalid
        On any other problem: header, base64, zlib stream, length, digest, range, indices.
    """
    _validated(enc, expected_cells, max_abs, max_bytes)


def validated_json(enc: EncodedCounts) -> str:
    """The JSON of counts that :func:`check_counts` accepted, the data spliced in as it is.

    ``enc.model_dump_json()`` scans every character of the data for escapes (116 us for
    the 170 KB of an m = 1,000 release, holding the GIL). Data that passed the strict
    base64 check holds only ``A-Za-z0-9+/=``, which JSON never escapes, so the text is the
    header's JSON with the data inserted. Only for validated counts.
    """
    head = enc.model_dump_json(exclude={"data"})
    return f'{head[:-1]},"data":"{enc.data}"}}'


def _validated(
    enc: EncodedCounts, expected_cells: int, max_abs: int, max_bytes: int
) -> tuple[NDArray[np.int64] | None, NDArray[np.signedinteger]]:
    """``(keys or None, values)``, the values a read-only view in the wire's dtype."""
    if enc.format != FORMAT:
        raise PayloadInvalid(f"unknown counts format {enc.format!r}, expected {FORMAT!r}")
    dtype = _DTYPES.get(enc.dtype)
    if dtype is None:
        raise PayloadInvalid(f"dtype {enc.dtype!r} not allowed; use one of {sorted(_DTYPES)}")
    if enc.n_cells != expected_cells:
        raise PayloadInvalid(
            f"counts have {enc.n_cells} cells but the study config implies {expected_cells}; "
            "re-fetch the config and release again"
        )
    if enc.layout == "dense":
        if enc.nnz is not None or enc.n_cells > MAX_CELLS:
            raise PayloadInvalid(f"a dense layout has no nnz and at most {MAX_CELLS} cells")
        nnz = 0
    elif enc.layout == "sparse":
        if enc.nnz is None or not 0 <= enc.nnz <= enc.n_cells:
            raise PayloadInvalid(f"sparse layout needs nnz in [0, {enc.n_cells}], got {enc.nnz}")
        nnz = enc.nnz
    else:
        raise PayloadInvalid(f"unknown layout {enc.layout!r}")
    size = _payload_len(enc.layout, dtype, enc.n_cells, nnz)
    if size > max_bytes:
        raise PayloadTooLarge(f"counts decompress to {size} bytes, over the {max_bytes} limit")
    body = inflate_exactly(enc.data, size)
    if not hmac.compare_digest(hashlib.sha256(body).hexdigest(), enc.sha256):
        raise PayloadInvalid("sha256 of the decompressed counts does not match the digest")
    indices: NDArray[np.int64] | None = None
    offset = 0
    if enc.layout == "sparse":
        words = key_words(enc.n_cells)
        offset = nnz * 8 * words
        indices = np.frombuffer(body, dtype=_INDEX_DTYPE, count=nnz * words).astype(np.int64)
        indices = indices.reshape(nnz, words)
        problem = keys_problem(indices, enc.n_cells)
        if problem:
            raise PayloadInvalid(f"sparse {problem}")
    values = np.frombuffer(body, dtype=dtype, offset=offset)
    wide = max_abs < 2 ** (8 * dtype.itemsize - 1)  # else every value of the type is in range
    if wide and values.size and (int(values.min()) < -max_abs or int(values.max()) > max_abs):
        cell = int(np.flatnonzero((values < -max_abs) | (values > max_abs))[0])
        raise ReleaseOutOfBounds(
            f"value {cell} is {int(values[cell])}; the public bound is [-{max_abs}, {max_abs}] "
            "(counts outside the allowed range of any count)", cell=cell,
            value=int(values[cell]), low=-max_abs, high=max_abs)
    return indices, values


def encode_release(release: Release) -> EncodedCounts:
    """Encode a :class:`~common.histograms.release.Release` in its own layout."""
    return encode_counts(release.values, indices=release.indices, n_cells=release.n_cells)


def to_dense(indices: ArrayLike | None, values: ArrayLike, n_cells: int) -> NDArray[np.int64]:
    """Scatter sparse ``(indices, values)`` into a dense int64 vector (copy if dense).

    Only for vectors of at most ``2**62`` cells (one-word keys)."""
    vals = np.asarray(values, dtype=np.int64)
    if indices is None:
        if vals.size != n_cells:
            raise ValueError(f"dense vector has {vals.size} cells, expected {n_cells}")
        return vals.copy()
    keys = as_keys(indices)
    if keys.shape[1] != 1:
        raise ValueError(f"a grid of {n_cells} cells is too large for a dense vector")
    out = np.zeros(n_cells, dtype=np.int64)
    out[keys[:, 0]] = vals
    return out
