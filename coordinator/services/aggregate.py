"""The global model: sums folded from the stored contributions, and their wire form.

Storage layout: ingest stores a contribution and bumps the study's model counter; it never
rewrites the sums. The sums live in one ``AggregateSnapshot`` row per study that is *folded*
forward when the model is read: add every contribution whose ``model_version`` is past the
snapshot's (:func:`coordinator.db.tables.in_model`: never a row that only itemises a charge),
subtract each release those replace (a participant counts once). Folding takes the snapshot
row lock and the contributions it reads were committed together with the counter they
bumped, so the result is exact under any number of workers; the ingest cost does not depend
on the model size or on how many contributions were merged before.

Every use of ``common.wire.encoding.decode_counts`` and ``common.histograms.merge`` is in
:func:`decode_vector` and :func:`combine` (ingest decodes with the first too, to check the poisoning
bounds), so a change of the sparse key type touches only these two functions.

Sums cannot wrap: ingest bounds every cell (:mod:`common.histograms.release_bounds`), a model cell
is the sum of one release per contributor, and :func:`combine` raises rather than wraps
(:attr:`common.histograms.release_bounds.ReleaseBounds.max_contributors`, ``2**22`` or more
contributors).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from threading import Lock

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from common.histograms.cellkeys import key_words
from common.histograms.merge import merge_sparse, merge_sum
from common.study.config import StudyConfig
from common.wire.encoding import EncodedCounts, decode_counts, encode_counts
from common.wire.schemas import ModelPublic
from coordinator.db.tables import AggregateSnapshot, Contribution, in_model

_I8 = np.dtype("<i8")
_I4 = np.iinfo(np.int32)
MODEL_ZLIB_LEVEL = 1
"""zlib level of the served model: level 9 cost 741 ms at 650k cells, level 1 27 ms (6 %
larger); the model is re-encoded at every new version, a release is encoded once."""
Decoded = tuple[NDArray[np.int64] | None, NDArray[np.int64]]
Part = tuple[Decoded, Decoded | None]
"""A contribution decoded: its LSH vector and its grid (None without a grid)."""


def decode_vector(enc: EncodedCounts, n_cells: int, max_bytes: int) -> Decoded:
    """Decode and validate one wire vector (``(indices or None, values)``, int64)."""
    return decode_counts(enc, expected_cells=n_cells, max_bytes=max_bytes)


def combine(total: Decoded, part: Decoded, sign: int = 1) -> Decoded:
    """``total + sign * part``, exact (overflow raises PayloadInvalid); sparse drops zeros."""
    (tot_idx, tot_val), (part_idx, part_val) = total, part
    if tot_idx is None or part_idx is None:
        return None, merge_sum(tot_val, sign * part_val)
    idx, val = merge_sparse(tot_idx, tot_val, part_idx, sign * part_val)
    keep = val != 0
    return idx[keep], val[keep]


def _array(blob: bytes | None) -> NDArray[np.int64]:
    return np.frombuffer(blob or b"", dtype=_I8).astype(np.int64)


def _blob(values: NDArray[np.int64]) -> bytes:
    return values.astype(_I8).tobytes()


@dataclass
class Sums:
    """Decoded sums of a snapshot: the LSH vector and the grid (None without a grid)."""

    lsh: Decoded
    grid: Decoded | None

    @classmethod
    def load(cls, snapshot: AggregateSnapshot, config: StudyConfig) -> Sums:
        lsh = _array(snapshot.lsh_sum)
        lsh = lsh if lsh.size else np.zeros(config.lsh_cells, dtype=np.int64)
        if config.grid is None:
            return cls((None, lsh), None)
        values = _array(snapshot.grid_values)
        if config.grid_layout == "dense":
            grid_values = values if values.size else np.zeros(config.grid_cells, dtype=np.int64)
            return cls((None, lsh), (None, grid_values))
        words = key_words(config.grid_cells)  # sparse keys: rows of `words` int64 words
        return cls((None, lsh), (_array(snapshot.grid_indices).reshape(-1, words), values))

    def store(self, snapshot: AggregateSnapshot) -> None:
        snapshot.lsh_sum = _blob(self.lsh[1])
        if self.grid is not None:
            indices, values = self.grid
            snapshot.grid_indices = _blob(indices) if indices is not None else None
            snapshot.grid_values = _blob(values)

    def add(self, part: Part, sign: int) -> None:
        """Add (``sign`` 1) or subtract (-1) one decoded contribution (:func:`decode_stored`)."""
        lsh, grid = part
        self.lsh = combine(self.lsh, lsh, sign)
        if self.grid is not None and grid is not None:
            self.grid = combine(self.grid, grid, sign)


def decode_stored(config: StudyConfig, row: tuple[str, str | None]) -> Part:
    """One stored contribution's ``(lsh, grid)`` payloads, decoded and checked again."""
    limit = 2**62  # already validated at ingest; the bound only guards memory
    lsh, grid = row
    decoded = decode_vector(EncodedCounts.model_validate_json(lsh), config.lsh_cells, limit)
    if grid is None or config.grid is None:
        return decoded, None
    enc = EncodedCounts.model_validate_json(grid)
    return decoded, decode_vector(enc, config.grid_cells, limit)


DECODERS = 2
"""Threads that decode stored contributions for a fold: inflate and SHA-256 release the GIL,
so on 2 cores a fold of m = 1,000 releases took 0.48 instead of 0.71 ms per contribution."""
_decoders: ThreadPoolExecutor | None = None
_decoders_lock = Lock()


def _decoded(config: StudyConfig, rows: Iterator[tuple[str, str | None]]) -> Iterator[Part]:
    """:func:`decode_stored` of each row on the :data:`DECODERS` threads, in order, with at
    most :data:`DECODERS` decoded ahead of the caller (a large model's vector is 52 MB)."""
    global _decoders
    with _decoders_lock:
        if _decoders is None:
            _decoders = ThreadPoolExecutor(DECODERS, thread_name_prefix="fedod-fold")
    pool, ahead = _decoders, deque[Future[Part]]()
    for row in rows:
        ahead.append(pool.submit(decode_stored, config, row))
        if len(ahead) > DECODERS:
            yield ahead.popleft().result()
    while ahead:
        yield ahead.popleft().result()


def _payloads(session: Session, where: ColumnElement[bool]) -> Iterator[tuple[str, str | None]]:
    query = select(Contribution.lsh_payload, Contribution.grid_payload).where(where)
    for row in session.execute(query).yield_per(32):
        yield row[0], row[1]


def fold(session: Session, study_id: str, config: StudyConfig, target: int) -> AggregateSnapshot:
    """Bring the study's snapshot to model version ``target`` (or later) and commit it.

    ``target`` must be a version read from the ``aggregates`` row: every contribution up to
    it is committed (it was stored in the transaction that bumped the counter).
    """
    snapshot = session.get(AggregateSnapshot, study_id)
    if snapshot is not None and snapshot.version >= target:
        return snapshot
    snapshot = session.scalar(
        select(AggregateSnapshot)
        .where(AggregateSnapshot.study_id == study_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    assert snapshot is not None, f"study {study_id!r} has no snapshot row"
    if snapshot.version >= target:
        session.commit()
        return snapshot
    window = (Contribution.study_id == study_id) & in_model(snapshot.version, target)
    sums = Sums.load(snapshot, config)
    for part in _decoded(config, _payloads(session, window)):
        sums.add(part, 1)
    replaced = select(Contribution.replaces_id).where(window, Contribution.replaces_id.is_not(None))
    for part in _decoded(config, _payloads(session, Contribution.id.in_(replaced))):
        sums.add(part, -1)
    newcomers = select(func.count()).where(window, Contribution.replaces_id.is_(None))
    sums.store(snapshot)
    snapshot.contributors += session.scalar(newcomers) or 0
    snapshot.version = target
    session.commit()
    return snapshot


def _wire(decoded: Decoded, n_cells: int) -> EncodedCounts:
    """The ``fedod-counts/1`` form of a model vector, compressed at ``MODEL_ZLIB_LEVEL``."""
    indices, values = decoded
    return encode_counts(values, indices=indices, n_cells=n_cells, level=MODEL_ZLIB_LEVEL)


_cache: OrderedDict[tuple[object, int, int], bytes] = OrderedDict()
_cache_lock = Lock()
_CACHE_SIZE = 32


def cached_model(config: StudyConfig, version: int) -> bytes | None:
    """The ``ModelPublic`` JSON of this config and model version if this process has it."""
    with _cache_lock:
        body = _cache.get((config.lsh.seed, config.version, version))
        if body is not None:
            _cache.move_to_end((config.lsh.seed, config.version, version))
        return body


def model_json(snapshot: AggregateSnapshot, config: StudyConfig) -> bytes:
    """The ``ModelPublic`` JSON of a snapshot, cached per (seed, config and model version)."""
    cached = cached_model(config, snapshot.version)
    if cached is not None:
        return cached
    sums = Sums.load(snapshot, config)
    model = ModelPublic(
        study_id=snapshot.study_id,
        config_version=config.version,
        version=snapshot.version,
        contributors=snapshot.contributors,
        lsh=_wire(sums.lsh, config.lsh_cells),
        grid=_wire(sums.grid, config.grid_cells) if sums.grid is not None else None,
    )
    body = model.model_dump_json().encode()
    with _cache_lock:
        _cache[(config.lsh.seed, config.version, snapshot.version)] = body
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return body
