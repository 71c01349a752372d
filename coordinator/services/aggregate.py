"""The global model: storage of the merged sums and their wire form (pure numpy + common)."""

from __future__ import annotations

from collections import OrderedDict
from threading import Lock

import numpy as np
from numpy.typing import NDArray

from common.cellkeys import key_words
from common.config import StudyConfig
from common.encoding import EncodedCounts, encode_counts
from common.merge import merge_sparse, merge_sum
from common.schemas import ModelPublic
from coordinator.models import Aggregate

_I8 = np.dtype("<i8")
Decoded = tuple[NDArray[np.int64] | None, NDArray[np.int64]]


def _array(blob: bytes | None, n: int | None = None) -> NDArray[np.int64]:
    if not blob:
        return np.zeros(n or 0, dtype=np.int64)
    return np.frombuffer(blob, dtype=_I8).astype(np.int64)


def lsh_sum(aggregate: Aggregate, config: StudyConfig) -> NDArray[np.int64]:
    return _array(aggregate.lsh_sum, config.lsh_cells)


def grid_sum(aggregate: Aggregate, config: StudyConfig) -> Decoded | None:
    """``(indices or None, values)`` of the merged grid, or None when the study has none."""
    if config.grid is None:
        return None
    if config.grid_layout == "dense":
        return None, _array(aggregate.grid_values, config.grid_cells)
    words = key_words(config.grid_cells)  # sparse keys: rows of `words` int64 words
    return _array(aggregate.grid_indices).reshape(-1, words), _array(aggregate.grid_values)


def add_release(
    aggregate: Aggregate, config: StudyConfig, lsh: NDArray[np.int64], grid: Decoded | None
) -> None:
    """Add one decoded release to the stored sums (exact; overflow raises PayloadInvalid)."""
    aggregate.lsh_sum = merge_sum(lsh_sum(aggregate, config), lsh).astype(_I8).tobytes()
    current = grid_sum(aggregate, config)
    if current is not None and grid is not None:
        (cur_idx, cur_val), (new_idx, new_val) = current, grid
        if cur_idx is None or new_idx is None:
            aggregate.grid_values = merge_sum(cur_val, new_val).astype(_I8).tobytes()
        else:
            idx, val = merge_sparse(cur_idx, cur_val, new_idx, new_val)
            aggregate.grid_indices = idx.astype(_I8).tobytes()
            aggregate.grid_values = val.astype(_I8).tobytes()


def _encode(decoded: Decoded, n_cells: int) -> EncodedCounts:
    indices, values = decoded
    return encode_counts(values, indices=indices, n_cells=n_cells)


_cache: OrderedDict[tuple[str, int, int], bytes] = OrderedDict()
_cache_lock = Lock()
_CACHE_SIZE = 32


def model_json(aggregate: Aggregate, config: StudyConfig) -> bytes:
    """The ``ModelPublic`` JSON of an aggregate, cached per (seed, config and model version)."""
    key = (config.lsh.seed, config.version, aggregate.version)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    grid = grid_sum(aggregate, config)
    model = ModelPublic(
        study_id=aggregate.study_id,
        config_version=config.version,
        version=aggregate.version,
        contributors=aggregate.contributors,
        lsh=_encode((None, lsh_sum(aggregate, config)), config.lsh_cells),
        grid=_encode(grid, config.grid_cells) if grid is not None else None,
    )
    body = model.model_dump_json().encode()
    with _cache_lock:
        _cache[key] = body
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return body
