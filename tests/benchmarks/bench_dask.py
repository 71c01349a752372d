"""Benchmark: exact histograms (the ``contribute`` path) of an N x 20 Parquet dataset, in-process
vs Dask on 1 and 2 workers, scaling with the partition count, and a paper estimate for 10^9
records on many machines.

Run: ``.venv/bin/python tests/benchmarks/bench_dask.py [--rows 10000000] [--files 16]
[--scaling 4,16,64] [--score] [--root DIR]``

Generates (once) ``DIR/dask_<rows>x<features>_<files>/part-*.parquet`` in bounded memory
(``DIR`` defaults to ``/tmp/fedod-bench``; 50M x 20 records take about 8 GB per partition
count, so put them on a disk with room). Every measurement runs in a fresh child process
(the client; Dask workers are its LocalCluster's own processes) and reads the whole
dataset, checks every value against the study's public bounds, hashes every record with the
study's 100 LSH tables and counts a dense 4-feature grid, exactly as
``fedod-participant contribute`` does. It prints records/s, the
client's peak RSS and every worker's peak RSS (``VmHWM`` read inside the worker), then the
per-partition cost measured on one worker and the estimate derived from it. ``--score`` also
times scoring (in-process vs Dask on 2 workers, both writing Parquet).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))
from bench_participant import ROOT, study, vmhwm  # noqa: E402

ROOT = Path(os.environ.get("FEDOD_BENCH_DIR", str(ROOT)))  # --root, inherited by the children


def dataset(rows: int, features: int, files: int) -> Path:
    """``files`` Parquet files of ~rows/files standard-normal records (fixed seed)."""
    folder = ROOT / f"dask_{rows}x{features}_{files}"
    if folder.exists():
        return folder
    tmp = folder.with_name(folder.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    names = [f"f{i:02d}" for i in range(features)]
    bounds = np.linspace(0, rows, files + 1).astype(int)
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        with pq.ParquetWriter(tmp / f"part-{i:05d}.parquet",
                              pa.schema([(n, pa.float64()) for n in names])) as writer:
            for start in range(a, b, 250_000):
                X = rng.normal(0.0, 1.0, size=(min(250_000, b - start), features))
                writer.write_table(pa.table({n: X[:, j] for j, n in enumerate(names)}))
    tmp.rename(folder)
    return folder


def study_file(features: int) -> Path:
    """One study config (one hash seed) shared by every child, written once."""
    path = ROOT / f"dask_study_{features}.json"
    if not path.exists():
        ROOT.mkdir(parents=True, exist_ok=True)
        path.write_text(study(features).model_dump_json())
    return path


def child(kind: str, folder: Path, features: int, workers: int, score: bool) -> dict:
    from common.study.config import StudyConfig
    from participant.data.dataset import DatasetSource
    from participant.data.reader import DataSpec
    from participant.release import contribute as rel

    config = StudyConfig.model_validate_json(study_file(features).read_text())
    source = DatasetSource(folder, DataSpec.from_config(config))
    family, grid = config.lsh_family(), config.grid_spec()
    out: dict = {"cells": family.n_cells}
    if kind == "inprocess":
        start, cpu = time.perf_counter(), time.process_time()
        exact = rel.exact_histograms(source, family, grid, dense_grid=True)
        out["seconds"] = time.perf_counter() - start
        out["cpu_seconds"] = time.process_time() - cpu
        if score:
            out["score_seconds"] = run_score(source, exact, config, None)
        out["workers_peak"] = []
    else:
        from distributed import Client

        from participant.dask import engine as engine_dask
        t0 = time.perf_counter()
        with engine_dask.local_cluster(n_workers=workers, security=False) as cluster, \
                Client(cluster) as client:
            client.run(importlib.import_module, "participant.dask.engine")  # warm workers
            out["startup_seconds"] = time.perf_counter() - t0
            cpu = sum(client.run(time.process_time).values())
            start = time.perf_counter()
            exact = engine_dask.exact_histograms(source, family, grid, dense_grid=True,
                                                 scheduler=cluster.scheduler_address)
            out["seconds"] = time.perf_counter() - start
            out["cpu_seconds"] = sum(client.run(time.process_time).values()) - cpu
            if score:
                out["score_seconds"] = run_score(source, exact, config,
                                                 cluster.scheduler_address)
            out["workers_peak"] = sorted(client.run(vmhwm).values())
    out["rows"] = source.report.rows
    out["lsh_sum"] = int(exact.lsh.sum())
    out["digest"] = __import__("hashlib").sha256(exact.lsh.tobytes()
                                                 + exact.grid_dense.tobytes()).hexdigest()
    out["client_peak"] = vmhwm()
    return out


def run_score(source, exact, config, scheduler: str | None) -> float:
    """Score the dataset with detectors built from its exact histograms; seconds taken."""
    import shutil

    from common.detectors import GridKNN, LSHiTables
    from participant.dask import engine as engine_dask
    from participant.scoring.score import score_source

    detectors = {"lsh": LSHiTables.from_histogram(config.lsh_family(), exact.lsh),
                 "grid": GridKNN.from_counts(config.grid_spec(), exact.grid_dense, k=10)}
    output = ROOT / "dask_scores.parquet"
    shutil.rmtree(output, ignore_errors=True)
    output.unlink(missing_ok=True)
    start = time.perf_counter()
    if scheduler is None:
        score_source(source, detectors, output, contamination=0.01)
    else:
        engine_dask.score_dataset(source, detectors, output, contamination=0.01,
                                  scheduler=scheduler)
    return time.perf_counter() - start


def run_child(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True,
                         text=True)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def mib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.0f}"


def estimate(per_partition: float, rows_per_partition: int, cells: int,
             features: int = 20) -> list[str]:
    """Paper estimate for 10^9 records: perfect parallelism over partitions plus a tree
    reduction of 8-way sums of the histogram vector over a 1 Gbit/s network."""
    total = 10**9
    per_record = per_partition / rows_per_partition
    hist_bytes = cells * 8 + 8 * 5**4
    lines = [f"per-partition cost on one worker: {per_partition:.2f} s for "
             f"{rows_per_partition:,} records = {per_record * 1e6:.2f} us/record",
             f"input a core consumes: {8 * features / per_record / 1e6:.0f} MB/s of float64 "
             f"values (below that the storage, not the CPU, sets the pace)",
             f"histogram vector {hist_bytes / 2**20:.1f} MiB; one 8-way reduction step "
             f"moves 8 of them: {8 * hist_bytes / 125e6:.2f} s at 1 Gbit/s",
             "| machines x cores | partitions of 1M | compute | reduction levels | "
             "estimate |", "|---|---|---|---|---|"]
    for machines in (1, 10, 100):
        cores = machines * 2
        parts = total // 10**6
        compute = np.ceil(parts / cores) * per_record * 10**6
        levels = int(np.ceil(np.log(parts) / np.log(8)))
        reduce = levels * 8 * hist_bytes / 125e6
        lines.append(f"| {machines} x 2 | {parts} | {compute / 60:.1f} min | {levels} | "
                     f"{(compute + reduce) / 60:.1f} min |")
    return lines


def main() -> int:
    global ROOT
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--files", type=int, default=16, help="partitions of the main run")
    parser.add_argument("--scaling", default="4,16,64",
                        help="partition counts for the scaling run on 2 workers")
    parser.add_argument("--score", action="store_true", help="also time scoring")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="where the generated datasets go (default: %(default)s)")
    parser.add_argument("--child", nargs=5, metavar=("KIND", "DIR", "F", "W", "SCORE"))
    args = parser.parse_args()
    if args.child:
        kind, folder, features, workers, score = args.child
        print(json.dumps(child(kind, Path(folder), int(features), int(workers),
                               score == "1")))
        return 0
    ROOT = args.root
    os.environ["FEDOD_BENCH_DIR"] = str(ROOT)
    t0 = time.perf_counter()
    study_file(args.features)
    folder = dataset(args.rows, args.features, args.files)
    print(f"data: {args.rows:,} x {args.features} in {args.files} Parquet files, {folder} "
          f"(ready in {time.perf_counter() - t0:.0f} s)\n")
    runs = [("in-process", "inprocess", 1), ("dask, 1 worker", "dask", 1),
            ("dask, 2 workers", "dask", 2)]
    results = {}
    print("| engine | seconds | records/s | CPU s | startup s | client peak MiB | "
          "worker peak MiB |"
          + (" score s | score records/s |" if args.score else ""))
    print("|---|---|---|---|---|---|---|" + ("---|---|" if args.score else ""))
    for label, kind, workers in runs:
        r = run_child(kind, str(folder), str(args.features), str(workers),
                      "1" if args.score else "0")
        results[label] = r
        peaks = ", ".join(mib(p) for p in r["workers_peak"]) or "-"
        line = (f"| {label} | {r['seconds']:.1f} | {r['rows'] / r['seconds']:,.0f} | "
                f"{r['cpu_seconds']:.1f} | {r.get('startup_seconds', 0):.1f} | "
                f"{mib(r['client_peak'])} | {peaks} |")
        if args.score:
            line += f" {r['score_seconds']:.1f} | {r['rows'] / r['score_seconds']:,.0f} |"
        print(line, flush=True)
    digests = {r["digest"] for r in results.values()}
    print(f"\nexact histograms identical across engines: {len(digests) == 1}")
    print("\nscaling with the partition count (dask, 2 workers, same records):\n")
    print("| partitions | records/partition | seconds | records/s | worker CPU s | "
          "worker peak MiB |")
    print("|---|---|---|---|---|---|")
    for files in (int(f) for f in args.scaling.split(",") if f):
        r = run_child("dask", str(dataset(args.rows, args.features, files)),
                      str(args.features), "2", "0")
        print(f"| {files} | {args.rows // files:,} | {r['seconds']:.1f} | "
              f"{r['rows'] / r['seconds']:,.0f} | {r['cpu_seconds']:.1f} | "
              f"{', '.join(mib(p) for p in r['workers_peak'])} |", flush=True)
    one = results["dask, 1 worker"]
    print("\npaper estimate for 10^9 records (from the 1-worker run's worker CPU time, i.e. "
          "one dedicated core per worker):\n")
    print("\n".join(estimate(one["cpu_seconds"] / args.files, args.rows // args.files,
                             one["cells"])))
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
