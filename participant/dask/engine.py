# mypy: disallow-untyped-calls=False
"""The Dask engine: exact histograms and scores of a many-file dataset on a Dask cluster.

Every file of the dataset (``participant.data.dataset``) is one partition, read and checked on a
worker by :class:`participant.data.reader.DataSource`, so a bad value fails with the same error
(file, column, rows, values) and exit code as in-process.

Histograms (``contribute``): a map over partitions (each file streamed chunk by chunk
through ``participant.data.counts.exact_histograms``) and a tree reduction by exact integer
summation. The exact counts come back to this process, the participant's own machine, where
``common.histograms.release`` draws the noise once, exactly as the in-process engine does: a worker
that dies makes Dask recompute its partition, never the release.

Scores (``score``): a map over partitions computing every detector's score per record, kept
on the workers; the dataset-wide combined score and rank are computed on the cluster by a
sample sort (``participant.dask.ranks``: this process sees samples and per-bucket counts,
never a score); a last map attaches ``outlier_score``, ``rank`` and ``outlier`` and
``dask.dataframe.to_parquet`` writes one Parquet file per partition into the output
directory. Scores and ranks equal the in-process ones.

Without a scheduler address a ``distributed.LocalCluster`` on loopback is started (and
stopped) for the call, with temporary TLS credentials (``Security.temporary()``). With an
address, :class:`distributed.Client` reads its TLS settings from the Dask configuration
(``distributed.comm.tls.*``); see docs/DASK.md for securing a cluster.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from distributed import Client, Future, LocalCluster, as_completed

from common.detectors.combine import shares
from common.histograms.grid import GridSpec
from common.histograms.hashing import LSHFamily
from common.histograms.merge import merge_sparse
from participant.dask.ranks import BUCKET_ROWS, combined_ranks
from participant.data.counts import ExactCounts, note_malformed
from participant.data.counts import exact_histograms as stream_histograms
from participant.data.dataset import DatasetSource, dataset_files, merge_reports
from participant.data.reader import DataReport, DataSource, DataSpec
from participant.progress import Progress
from participant.scoring.score import CohortColumns, Detector, ScoreSummary, flag_count

SPLIT_EVERY = 8
Source = DataSource | DatasetSource
Partial = tuple[ExactCounts, DataReport]


def local_cluster(**kw: Any) -> LocalCluster:
    """A ``LocalCluster`` on loopback: one thread per worker process, no dashboard, temporary
    TLS credentials (``security=False`` for plain TCP), and workers spawned *without* Dask's
    default ``MALLOC_TRIM_THRESHOLD_``: with it, glibc stops adapting its mmap threshold and
    every large numpy temporary of the hashing is mapped and zeroed afresh (measured 3-4x
    slower per partition on this machine)."""
    import dask
    from distributed.security import Security

    env = dict(dask.config.get("distributed.nanny.pre-spawn-environ"))
    env.pop("MALLOC_TRIM_THRESHOLD_", None)
    options: dict[str, Any] = dict(processes=True, threads_per_worker=1, host="127.0.0.1",
                                   dashboard_address=None, **kw)
    if "security" not in options:
        options["security"] = Security.temporary()
    elif options["security"] is False:
        del options["security"]
    with dask.config.set({"distributed.nanny.pre-spawn-environ": env}):
        return LocalCluster(**options)


@contextmanager
def dask_client(scheduler: str | None = None, client: Client | None = None,
                **cluster: Any) -> Iterator[Client]:
    """A client of the cluster at ``scheduler``, or of a new :func:`local_cluster`; ``client``
    (one already connected, e.g. started before a release's send slot began) is used as is."""
    if client is not None:
        yield client
        return
    if scheduler is not None:
        try:
            connected = Client(scheduler)
        except (OSError, TypeError, ValueError) as exc:  # unreachable, refused, TLS mismatch
            raise OSError(f"cannot connect to the Dask scheduler at {scheduler}: {exc}; check "
                          "--scheduler and the cluster's TLS settings (docs/DASK.md)") from exc
        with connected as client:
            yield client
        return
    with local_cluster(**cluster) as local, Client(local) as client:
        yield client


def source_files(source: Source) -> list[Path]:
    """The partition files of a dataset, or of the one file (one partition)."""
    return source.files if isinstance(source, DatasetSource) else dataset_files(source.path)


def partition_counts(file: Path, spec: DataSpec, chunk_rows: int, family: LSHFamily,
                     grid: GridSpec | None, dense_grid: bool) -> Partial:
    """Exact histograms of one partition (file), streamed in chunks; runs on a worker."""
    source = DataSource(file, spec, chunk_rows=chunk_rows)
    counts = stream_histograms(source, family, grid, dense_grid=dense_grid)
    return counts, source.report


def add_partials(*parts: Partial) -> Partial:
    """Exact sum of partial histograms and local reports (one node of the tree reduction)."""
    first = parts[0][0]
    total = ExactCounts(lsh=first.lsh.copy(), grid_dense=None if first.grid_dense is None
                        else first.grid_dense.copy(),
                        grid_cells=first.grid_cells, grid_counts=first.grid_counts)
    for counts, _ in parts[1:]:
        total.lsh += counts.lsh
        if total.grid_dense is not None and counts.grid_dense is not None:
            total.grid_dense += counts.grid_dense
        elif counts.grid_cells is not None and counts.grid_counts is not None:
            assert total.grid_cells is not None and total.grid_counts is not None
            total.grid_cells, total.grid_counts = merge_sparse(
                total.grid_cells, total.grid_counts, counts.grid_cells, counts.grid_counts)
    return total, merge_reports(parts[0][1].path, [r for _, r in parts])


def first_error(futures: Sequence[Future[Any]], label: str = "", progress: bool = False) -> None:
    """Wait for every partition, with a line of partitions done on stderr when ``progress``;
    raise the error of the first failed one in file order (the one the in-process engine,
    reading the files in that order, would raise)."""
    bar = Progress(label, total=len(futures), enabled=progress, unit="partitions")
    for _ in as_completed(futures):
        bar.update(1)
    bar.close()
    for future in futures:
        if future.status == "error":
            future.result()


def tree_sum(client: Client, futures: Sequence[Future[Any]],
             split_every: int = SPLIT_EVERY) -> Partial:
    """Reduce futures with :func:`add_partials`, ``split_every`` at a time, level by level."""
    level = list(futures)
    while len(level) > 1:
        level = [client.submit(add_partials, *level[i:i + split_every], pure=False)
                 for i in range(0, len(level), split_every)]
    result: Partial = level[0].result()
    return result


def exact_histograms(
    source: Source, family: LSHFamily, grid: GridSpec | None, *, dense_grid: bool,
    scheduler: str | None = None, client: Client | None = None,
) -> ExactCounts:
    """Exact histograms of every partition, summed in the cluster; sets ``source.report``.
    A release passes the ``client`` it connected before its send slot began, so that a
    LocalCluster's start-up does not count against the slot."""
    files = source_files(source)
    with dask_client(scheduler, client) as client:
        parts = client.map(partition_counts, files, spec=source.spec,
                           chunk_rows=source.chunk_rows, family=family, grid=grid,
                           dense_grid=dense_grid, pure=False)
        first_error(parts, f"counting {Path(source.path).name}", source.progress)
        counts, report = tree_sum(client, parts)
    report.path = str(source.path)
    source.report = report
    note_malformed(source)
    return counts


def partition_report(file: Path, spec: DataSpec, chunk_rows: int) -> DataReport:
    """Read and check one partition; only its local report comes back."""
    source = DataSource(file, spec, chunk_rows=chunk_rows)
    for _ in source:
        pass
    return source.report


def check_dataset(source: Source, *, scheduler: str | None = None,
                  client: Client | None = None) -> Source:
    """Check every partition against the study schema on the cluster; sets ``source.report``."""
    with dask_client(scheduler, client) as client:
        parts = client.map(partition_report, source_files(source), spec=source.spec,
                           chunk_rows=source.chunk_rows, pure=False)
        first_error(parts, f"checking {Path(source.path).name}", source.progress)
        source.report = merge_reports(str(source.path), client.gather(parts))
    return source


def partition_scores(file: Path, spec: DataSpec, chunk_rows: int,
                     detectors: Mapping[str, Detector], cohorts: CohortColumns | None = None,
                     ) -> tuple[pd.DataFrame, DataReport]:
    """Every detector's score for each record of one partition (plus its key column and,
    with ``cohorts``, its released cohort and distance)."""
    source = DataSource(file, spec, chunk_rows=chunk_rows)
    parts: dict[str, list[np.ndarray]] = {f"score_{n}": [] for n in detectors}
    keys = []
    for chunk in source:
        for col, values in (cohorts.columns(chunk.X) if cohorts else {}).items():
            parts.setdefault(col, []).append(values)
        for name, det in detectors.items():
            parts[f"score_{name}"].append(np.asarray(det.decision_function(chunk.X), np.float64))
        if chunk.keys is not None:
            keys.append(chunk.keys.to_pandas())
    frame = pd.DataFrame({k: np.concatenate(v) if v else np.empty(0) for k, v in parts.items()})
    if spec.id_column is not None:
        frame.insert(0, spec.id_column, pd.concat(keys, ignore_index=True) if keys
                     else pd.Series([], dtype=object))
    return frame, source.report


def finish_partition(part: tuple[pd.DataFrame, DataReport], first_row: int,
                     combined: np.ndarray, rank: np.ndarray, *, key_name: str,
                     k: int) -> pd.DataFrame:
    """Attach the dataset-wide combined score, rank and flag to one partition's scores."""
    frame = part[0].copy()
    if key_name not in frame:
        frame.insert(0, key_name, np.arange(first_row, first_row + len(frame), dtype=np.int64))
    frame["outlier_score"] = combined
    frame["rank"] = rank
    frame["outlier"] = rank <= k
    return frame


def score_dataset(
    source: Source, detectors: Mapping[str, Detector], output: str | Path, *,
    contamination: float | None = None, top_k: int | None = None, progress: bool = False,
    scheduler: str | None = None, weights: Mapping[str, float] | None = None,
    cohorts: CohortColumns | None = None, bucket_rows: int = BUCKET_ROWS,
) -> ScoreSummary:
    """Score every partition on the cluster; write a partitioned Parquet directory. The
    combined score and ranks are :func:`common.detectors.combine.combine`'s with ``weights``,
    computed on the cluster (``participant.dask.ranks``, buckets of ``bucket_rows``)."""
    import dask.dataframe as dd

    output = Path(output)
    if output.suffix.lower() not in (".parquet", ".pq"):
        raise ValueError(f"output {output}: the dask engine writes a partitioned Parquet "
                         "directory; give a name ending in .parquet")
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise ValueError(f"output {output} exists; give a new directory name")
    files = source_files(source)
    scratch = output.parent / f".{output.name}.ranks-{uuid.uuid4().hex}"
    try:
        with dask_client(scheduler) as client:
            [remote] = client.scatter([dict(detectors)], broadcast=True)
            parts = client.map(partition_scores, files, spec=source.spec,
                               chunk_rows=source.chunk_rows, detectors=remote, cohorts=cohorts,
                               pure=False)
            first_error(parts, f"scoring {Path(source.path).name}", progress)
            sized = client.gather(client.map(_size_and_report, parts, pure=False))
            sizes = [size for size, _ in sized]
            report = merge_reports(str(source.path), [r for _, r in sized])
            n = report.rows
            if n == 0:
                raise ValueError(f"{source.path}: no records to score")
            k = flag_count(n, contamination=contamination, top_k=top_k)
            combined, rank = combined_ranks(client, parts, sizes, shares(detectors, weights),
                                            scratch, bucket_rows, progress=progress)
            firsts = np.cumsum([1] + sizes)
            key_name = source.spec.id_column or "row"
            done = client.map(finish_partition, parts, firsts[:-1].tolist(), combined, rank,
                              key_name=key_name, k=k, pure=False)
            dd.from_delayed(done, verify_meta=False).to_parquet(
                output, write_index=False, compute_kwargs={"scheduler": client})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    source.report = report
    return ScoreSummary(rows=n, flagged=k, output=str(output), clipped=report.clipped_total)


def _size_and_report(part: tuple[pd.DataFrame, DataReport]) -> tuple[int, DataReport]:
    return len(part[0]), part[1]
