# mypy: disallow-untyped-calls=False
"""Dataset-wide combined scores and ranks on the Dask cluster, with no per-record data in the
client (the sample sort of :mod:`common.detectors.ranks`).

The per-detector scores stay on the workers, in each partition's future. Each detector with
a non-zero share takes one sort pass for its average ranks, the partition adds its rank
percentiles to its combined score (:func:`common.detectors.combine.mix`, in the order of the
in-process engine, so the bits agree), and one more pass over the negated combined score
gives the ordinal ranks. A pass:

1. every partition sorts its values once into distinct values with counts (kept on its
   worker) and sends a sorted sample of ``SAMPLE`` of them and its count; this process picks
   the cut points (one bucket per ``bucket_rows`` records);
2. every partition writes its distinct values with their counts (16 bytes each) to a scratch
   file and sends, per bucket, its slice bounds and record count;
3. one task per bucket reads its slice of every partition's file (memory-mapped) and writes
   the resolved rows (24 bytes per entry);
4. every partition reads its slices back and maps them onto its records.

This process holds the samples and per-bucket counts (``SAMPLE`` values and about 2
numbers per bucket, per partition and pass), never a score or a rank. A bucket task holds
the distinct values of its range (heavy ties are one entry). The scratch directory must be
on storage that every worker and this process reach (the output directory's parent: the
workers write the output there anyway); its files hold derived scores of the participant's
records, stay on the participant's storage, and are removed when scoring ends (also after an
error). Every file is written under a temporary name and renamed, so a task Dask re-runs
after a worker died rewrites the same bytes.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from distributed import Client, Future

from common.detectors import ranks
from common.detectors.combine import mix
from participant.progress import Progress

SAMPLE = 256
"""Values each partition samples per pass for the cut points."""
BUCKET_ROWS = 2**20
"""Records per bucket the cut points aim for (a bucket task's peak: ~110 bytes per distinct
value, so ~110 MB at most)."""
MAX_BUCKETS = 4096


@dataclass(frozen=True)
class Layout:
    """Where one partition's resolved rows are: ``files[b][starts[b]:stops[b]]`` for each
    bucket ``b`` (the file names are shared by every partition's layout)."""

    files: list[str]
    starts: np.ndarray
    stops: np.ndarray
    nan_first: int

    @property
    def slices(self) -> list[tuple[str, int, int]]:
        return [(f, int(a), int(b)) for f, a, b in zip(self.files, self.starts, self.stops,
                                                      strict=True)]


def _save(path: Path, array: np.ndarray) -> None:
    """Write ``array`` to ``path`` under a temporary name, then rename it."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as f:
            np.save(f, array)
    except (FileNotFoundError, PermissionError) as exc:
        raise OSError(f"cannot write the ranking's scratch file {path} on this Dask worker "
                      f"({exc.strerror}): the output directory's parent must be on storage "
                      "every worker can write (docs/DASK.md)") from exc
    os.replace(tmp, path)


def _values(source: Any, column: str | None) -> np.ndarray:
    """A detector's scores from a partition's ``(frame, report)``, or (``column`` None) its
    negated combined scores: the ordinal ranks order them descending."""
    if column is None:
        negated: np.ndarray = np.negative(source)
        return negated
    scores: np.ndarray = source[0][column].to_numpy(dtype=np.float64)
    return scores


def _tally(source: Any, column: str | None) -> ranks.Tally:
    """The partition's tally, kept on the worker."""
    return ranks.tally(_values(source, column))


def _sample(t: ranks.Tally, size: int) -> tuple[np.ndarray, int]:
    return ranks.sample(t, size), t.finite_count


def _split(t: ranks.Tally, path: str, cuts: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Write the partition's entries to ``path``; its bucket bounds, records per bucket and
    NaN count."""
    _save(Path(path), t.entries)
    b = ranks.bounds(t, cuts)
    return b, ranks.bucket_records(t, b), t.nan_count


def _slices(slices: Sequence[tuple[str, int, int]]) -> list[np.ndarray]:
    """``array[start:stop]`` of each ``(file, start, stop)``, read through a memory map."""
    return [np.asarray(np.load(f, mmap_mode="r")[lo:hi]) for f, lo, hi in slices]


def _resolve(pieces: Sequence[tuple[str, int, int]], offset: int, path: str) -> None:
    """Resolve one bucket from each partition's slice; write the rows in partition order."""
    rows = ranks.resolve(_slices(pieces), offset)
    _save(Path(path), np.concatenate(rows) if rows else np.empty(0, dtype=ranks.RESOLVED))


def _resolved(layout: Layout) -> np.ndarray:
    parts = _slices(layout.slices)
    return np.concatenate(parts) if parts else np.empty(0, dtype=ranks.RESOLVED)


def _average(t: ranks.Tally, layout: Layout) -> np.ndarray:
    return ranks.average_ranks_of(t, _resolved(layout), layout.nan_first)


def _ordinal(t: ranks.Tally, layout: Layout) -> np.ndarray:
    return ranks.ordinal_ranks_of(t, _resolved(layout))


def sort_pass(
    client: Client, sources: Sequence[Future[Any]], column: str | None, n: int, folder: Path,
    bucket_rows: int = BUCKET_ROWS,
) -> tuple[list[Future[Any]], list[Layout]]:
    """One sample-sort pass over the partitions' values (:func:`_values` of ``sources`` and
    ``column``; ``n`` records in all): each partition's tally (on its worker) and where its
    resolved rows are."""
    folder.mkdir()
    tallies = client.map(_tally, sources, column=column, pure=False)
    samples = client.gather(client.map(_sample, tallies, size=SAMPLE, pure=False))
    buckets = max(1, min(MAX_BUCKETS, math.ceil(n / bucket_rows)))
    cuts = ranks.cut_points(samples, buckets)
    inputs = [str(folder / f"part-{i}.npy") for i in range(len(sources))]
    shapes = client.gather(client.map(_split, tallies, inputs, cuts=cuts, pure=False))
    per_bucket = np.sum([records for _, records, _ in shapes], axis=0)
    offsets = np.concatenate([[0], np.cumsum(per_bucket)])
    outputs = [str(folder / f"bucket-{b}.npy") for b in range(cuts.size + 1)]
    resolved = [client.submit(_resolve, [(f, int(bounds[b]), int(bounds[b + 1]))
                                         for f, (bounds, _, _) in zip(inputs, shapes, strict=True)],
                              int(offsets[b]), out, pure=False)
                for b, out in enumerate(outputs)]
    client.gather(resolved)  # every bucket written (a failed one raises its error)
    nan_first = int(offsets[-1])
    layouts, starts = [], np.zeros(len(outputs), dtype=np.int64)
    for bounds, _, nan_count in shapes:
        stops = starts + np.diff(bounds)
        layouts.append(Layout(outputs, starts, stops, nan_first))
        starts, nan_first = stops, nan_first + nan_count
    return tallies, layouts


def _mixed(combined: np.ndarray, average: np.ndarray, share: float, n: int) -> np.ndarray:
    out = combined.copy()  # a future's value is never changed in place
    mix(out, share, average, n)
    return out


def combined_ranks(
    client: Client, parts: Sequence[Future[Any]], sizes: Sequence[int],
    shares: Mapping[str, float], scratch: Path, bucket_rows: int = BUCKET_ROWS, *,
    progress: bool = False,
) -> tuple[list[Future[Any]], list[Future[Any]]]:
    """Futures of each partition's combined scores and ordinal ranks over the dataset, as
    :func:`common.detectors.combine.combine` computes them over the concatenated scores.

    ``parts`` are futures of ``(frame, report)`` with a ``score_<name>`` column per
    detector; ``sizes`` their record counts; ``shares`` from
    :func:`common.detectors.combine.shares`; ``scratch`` a new directory every worker
    reaches. With ``progress``, a line of sort passes done on stderr.
    """
    n = int(sum(sizes))
    scratch.mkdir(parents=True)
    bar = Progress("ranking", total=len(shares) + 1, enabled=progress, unit="passes")
    combined = [client.submit(np.zeros, size, dtype=np.float64, pure=False) for size in sizes]
    for i, (name, share) in enumerate(shares.items()):
        tallies, layouts = sort_pass(client, parts, f"score_{name}", n,
                                     scratch / f"detector-{i}", bucket_rows)
        average = client.map(_average, tallies, layouts, pure=False)
        combined = client.map(_mixed, combined, average, share=share, n=n, pure=False)
        del tallies, average  # the worker frees them once the mix is done
        bar.update(1)
    tallies, layouts = sort_pass(client, combined, None, n, scratch / "combined", bucket_rows)
    bar.update(1)
    bar.close()
    return combined, client.map(_ordinal, tallies, layouts, pure=False)
