"""Benchmark: participant scoring throughput and peak memory on a large Parquet file.

Run: ``.venv/bin/python tests/benchmarks/bench_participant.py [--rows 5000000] [--features 20]``

Generates (once) ``/tmp/fedod-bench/records_<rows>x<features>.parquet`` in bounded memory,
builds a global model (noisy LSH iTables with 100 tables + dense grid on 4 features) from a
sample, then in *separate child processes* measures

- baseline: reading the whole file into numpy arrays, chunk by chunk (no scoring);
- scoring: ``participant.scoring.score.score_source`` (read, check, clip, score with both
  detectors, rank, write Parquet), the same path ``fedod-participant score`` runs;

and prints records/s, wall times, their ratio and each child's peak RSS (``ru_maxrss``).
Fails (exit 1) if scoring's peak RSS reaches 1 GiB.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path("/tmp/fedod-bench")
LIMIT_BYTES = 1 << 30


def data_path(rows: int, features: int) -> Path:
    return ROOT / f"records_{rows}x{features}.parquet"


def generate(rows: int, features: int) -> Path:
    path = data_path(rows, features)
    if path.exists():
        return path
    ROOT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    names = [f"f{i:02d}" for i in range(features)]
    schema = pa.schema([(n, pa.float64()) for n in names])
    tmp = path.with_suffix(".tmp")
    with pq.ParquetWriter(tmp, schema) as writer:
        for start in range(0, rows, 250_000):
            n = min(250_000, rows - start)
            X = rng.normal(0.0, 1.0, size=(n, features))
            writer.write_table(pa.table({c: X[:, i] for i, c in enumerate(names)}, schema=schema))
    tmp.rename(path)
    return path


def study(features: int):
    from common.study.config import FeatureSpec, GridParams, PrivacyParams, new_study_config

    feats = [FeatureSpec(name=f"f{i:02d}", lo=-5.0, hi=5.0) for i in range(features)]
    return new_study_config(
        "bench", feats, n_tables=100, sample_size=1000,
        grid=GridParams(bins=5, features=[f.name for f in feats[:4]], k=10),
        privacy=PrivacyParams(epsilon_lsh="1", epsilon_grid="1"),
    )


def child_baseline(path: Path) -> dict:
    start = time.perf_counter()
    total = 0.0
    for batch in pq.ParquetFile(path, pre_buffer=False).iter_batches(batch_size=65_536):
        X = np.column_stack([c.to_numpy() for c in batch.columns])
        total += float(X[0, 0])
    return {"seconds": time.perf_counter() - start}


def child_score(path: Path, features: int) -> dict:
    from common.detectors import GridKNN, LSHiTables
    from common.histograms.release import release_grid, release_lsh
    from participant.data.reader import DataSource, DataSpec
    from participant.scoring.score import score_source

    config = study(features)
    sample = pq.ParquetFile(path).iter_batches(batch_size=20_000).__next__()
    X = np.clip(np.column_stack([c.to_numpy() for c in batch_columns(sample)]), -5, 5)
    family, spec = config.lsh_family(), config.grid_spec()
    lsh = release_lsh(family, X, "1")
    grid = release_grid(spec, X, "1", "0", config.grid.cell_limit)
    detectors = {
        "lsh": LSHiTables.from_histogram(family, lsh.values, scoring="mass"),
        "grid": GridKNN.from_counts(spec, grid.values, k=10, max_depth=3),
    }
    source = DataSource(path, DataSpec.from_config(config))
    start = time.perf_counter()
    summary = score_source(source, detectors, ROOT / "scores.parquet", contamination=0.01)
    return {"seconds": time.perf_counter() - start, "rows": summary.rows}


def batch_columns(batch: pa.RecordBatch) -> list[pa.Array]:
    return list(batch.columns)


def vmhwm() -> int | None:
    """Peak RSS of this process image from /proc (Linux), not inherited from the parent."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def run_child(kind: str, path: Path, features: int, rows: int = 0) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, "--path", str(path),
         "--features", str(features), "--rows", str(rows)],
        capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--child", choices=("generate", "baseline", "score"))
    parser.add_argument("--path")
    args = parser.parse_args()
    if args.child == "generate":
        print(json.dumps({"path": str(generate(args.rows, args.features))}))
        return 0
    if args.child:
        path = Path(args.path)
        result = child_baseline(path) if args.child == "baseline" else child_score(
            path, args.features)
        result["maxrss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        result["vmhwm_bytes"] = vmhwm()
        print(json.dumps(result))
        return 0
    t0 = time.perf_counter()
    # Generate in a child: ru_maxrss survives fork+exec, so this process must stay small.
    path = Path(run_child("generate", Path("-"), args.features, args.rows)["path"])
    print(f"data: {path} ({path.stat().st_size / 2**20:.0f} MiB, "
          f"ready in {time.perf_counter() - t0:.1f} s)")
    base = run_child("baseline", path, args.features)
    score = run_child("score", path, args.features)
    parent = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"parent peak RSS (inherited by children's ru_maxrss): {parent:.0f} MiB")
    rate = args.rows / score["seconds"]
    for label, r, n_rate in (("numpy read only", base, args.rows / base["seconds"]),
                             ("score (2 dets) ", score, rate)):
        print(f"{label}: {r['seconds']:7.1f} s  {n_rate:11,.0f} records/s  peak RSS "
              f"{r['maxrss_bytes'] / 2**20:5.0f} MiB (VmHWM {r['vmhwm_bytes'] / 2**20:.0f})")
    print(f"ratio score/read: {score['seconds'] / base['seconds']:.1f}x")
    if score["maxrss_bytes"] >= LIMIT_BYTES:
        print("FAIL: peak memory reached 1 GiB")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
