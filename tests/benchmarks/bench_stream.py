"""Throughput and latency of ``fedod-participant stream`` beside the batch ``score`` command.

Run from the repository root (a real coordinator process on loopback, real CLI processes)::

    nice -n 10 .venv/bin/python tests/benchmarks/bench_stream.py --records 20000

1. The batch ``score`` command on a CSV of N records: records per second (wall time of the
   whole process, start-up included).
2. ``stream`` on the same N records as JSON lines on stdin, as fast as it reads them: records
   per second (same accounting), with LSH iTables and the online classifier scoring, the
   reviewer's labels file in use and one noisy gradient release per schedule window going out
   (``--clock ticks``: a tick line after every ``WINDOW`` records ends a window).
3. ``stream`` fed at a fixed pace (``--pace`` records per second, below its throughput):
   arrival-to-score latency, from the moment a record's line is written to the stream's stdin
   to the moment its score line is in the output file (median, 99th percentile, max).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from simulation.processes import free_port, start_coordinator  # noqa: E402

EXE = [sys.executable, "-m", "participant.cli.main", "--no-progress"]
D = 8
WINDOW = 1000


def with_ticks(lines: list[str], first: int) -> list[str]:
    """A tick line (window ``first``, ``first + 1``, ...) after every ``WINDOW`` records."""
    out: list[str] = []
    for i, line in enumerate(lines, 1):
        out.append(line)
        if i % WINDOW == 0:
            out.append(json.dumps({"tick": first + i // WINDOW - 1}) + "\n")
    return out


def setup(work: Path, n: int) -> tuple[object, list[str], Path, Path, Path]:
    proc, url, admin = start_coordinator(work, None, free_port())
    api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=60)
    names = [f"f{i}" for i in range(D)]
    api.post("/v1/studies", json={
        "study_id": "bench", "features": [{"name": f, "lo": 0.0, "hi": 1.0} for f in names],
        "lsh": {"n_tables": 50, "sample_size": 16}, "privacy": {"epsilon_lsh": "1"},
        "online": {"dim": D + 1, "p": 0.09, "window_slots": WINDOW,
                   "window_seconds": 60}}).raise_for_status()
    token = api.post("/v1/participants", json={"name": "h1", "epsilon_cap": "100",
                                               "delta_cap": "0.001"}).json()["token"]
    api.post("/v1/studies/bench/members", json={"participant": "h1"}).raise_for_status()
    state = ["--state", str(work / "state")]
    subprocess.run([*EXE, *state, "enrol", "--coordinator", url, "--fingerprint",
                    api.get("/v1/key").json()["key_id"], "--token", token, "--epsilon-cap",
                    "100", "--delta-cap", "0.001", "--max-release-epsilon", "5"], check=True,
                   capture_output=True)
    rng = np.random.default_rng(0)  # data only
    X = rng.uniform(0, 1, size=(n, D))
    y = (X[:, 0] + X[:, 1] > 1.4).astype(int)
    csv_path, jsonl, labels = work / "data.csv", work / "data.jsonl", work / "labels.csv"
    csv_path.write_text("id," + ",".join(names) + "\n" + "".join(
        f"r{i}," + ",".join(f"{v:.6f}" for v in x) + "\n" for i, x in enumerate(X)))
    jsonl.write_text("".join(json.dumps({"id": f"r{i}", **dict(zip(names, x.tolist(),
                                                                    strict=True))}) + "\n"
                             for i, x in enumerate(X)))
    labels.write_text("".join(f"{k}{i},{v}\n" for k in "rqp" for i, v in enumerate(y)))
    subprocess.run([*EXE, *state, "contribute", "bench", str(csv_path), "--id-column", "id",
                    "--send-slot", "0"], check=True, capture_output=True)
    return proc, state, csv_path, jsonl, labels


def timed(cmd: list[str], stdin_path: Path | None = None) -> float:
    start = time.perf_counter()
    with (stdin_path.open() if stdin_path else open("/dev/null")) as stdin:
        done = subprocess.run(cmd, stdin=stdin, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr[-2000:]}")
    return time.perf_counter() - start


def paced_latency(state: list[str], lines: list[str], labels: Path, out: Path, pace: float
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Write ``lines[0]`` and wait for its score line (start-up done), then the rest at
    ``pace``/s; returns each later record's latency and the times its score line appeared."""
    proc = subprocess.Popen([*EXE, *state, "stream", "bench", "--out", str(out), "--labels",
                             str(labels), "--clock", "ticks"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sent: list[float] = []
    seen: list[float] = []
    stop = threading.Event()

    def tail() -> None:
        while not out.exists():
            time.sleep(0.0005)
        with out.open() as fh:
            header = ""
            while not header.endswith("\n"):  # the file may exist before its header is in
                header += fh.readline() or (time.sleep(0.0002) or "")
            buf = ""
            while len(seen) < len(lines) and not (stop.is_set() and not buf):
                chunk = fh.readline()
                if not chunk:
                    time.sleep(0.0002)
                    continue
                buf += chunk
                if buf.endswith("\n"):
                    seen.append(time.perf_counter())
                    buf = ""

    reader = threading.Thread(target=tail)
    reader.start()
    assert proc.stdin is not None
    proc.stdin.write(lines[0])
    proc.stdin.flush()
    sent.append(time.perf_counter())
    while not seen:  # observed progress: the warm-up record is scored
        time.sleep(0.001)
    start = time.perf_counter()
    for i, line in enumerate(lines[1:]):
        while time.perf_counter() < start + i / pace:
            pass
        if not line.startswith('{"tick"'):  # a tick ends a window: no score line
            sent.append(time.perf_counter())
        proc.stdin.write(line)
        proc.stdin.flush()
    proc.stdin.close()
    proc.wait()
    stop.set()
    reader.join()
    done = np.array(seen[1:])
    return done - np.array(sent[1: len(seen)]), done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--pace", type=float, default=200.0, help="records/s for the latency run")
    ap.add_argument("--paced-records", type=int, default=2000)
    ap.add_argument("--profile", action="store_true", help="profile the unpaced stream run")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-stream-"))
    proc, state, csv_path, jsonl, labels = setup(work, args.records)
    try:
        n = args.records
        t_score = timed([*EXE, *state, "score", "bench", str(csv_path), "--id-column", "id",
                         "--output", str(work / "scores.csv")])
        prof = [sys.executable, "-m", "cProfile", "-o", str(work / "stream.prof"), "-m",
                "participant.cli.main", "--no-progress"]
        lines = jsonl.read_text().splitlines(keepends=True)
        windows = -(-n // WINDOW)
        ticked = work / "ticked.jsonl"
        ticked.write_text("".join(with_ticks(lines, 1)))
        t_stream = timed([*(prof if args.profile else EXE), *state, "stream", "bench",
                          "--out", str(work / "s1.csv"), "--labels", str(labels), "--clock",
                          "ticks"], ticked)
        fast = [line.replace('"id": "r', '"id": "q') for line in lines]
        _, seen = paced_latency(state, with_ticks(fast, windows + 1), labels,
                                work / "s3.csv", 1e9)
        steady = (len(seen) - 1) / (seen[-1] - seen[0])
        fresh = [line.replace('"id": "r', '"id": "p') for line in lines[: args.paced_records]]
        lat, _ = paced_latency(state, with_ticks(fresh, 2 * windows + 1), labels,
                               work / "s2.csv", args.pace)
    finally:
        proc.terminate()  # type: ignore[attr-defined]
    print(f"\n{n} records, {D} features, 50 LSH tables + the online classifier "
          f"(p = 0.09, one noisy release per window of {WINDOW} records, closed by a tick); "
          "wall time of each CLI process, start-up included.\n")
    print("| command | records/s | wall s |\n|---|---|---|")
    print(f"| score (batch, CSV file) | {n / t_score:,.0f} | {t_score:.1f} |")
    print(f"| stream (JSON lines on stdin, unpaced) | {n / t_stream:,.0f} | {t_stream:.1f} |")
    print(f"| stream, after start-up (first to last score line, unpaced) | {steady:,.0f} | "
          f"{(len(seen) - 1) / steady:.1f} |")
    if args.profile:
        print(f"profile: {work / 'stream.prof'}")
    ms = 1000 * lat
    print(f"\nstream fed at {args.pace:g} records/s after a warm-up record ({len(lat)} "
          f"records): arrival-to-score "
          f"latency median {np.median(ms):.2f} ms, p99 {np.percentile(ms, 99):.2f} ms, "
          f"max {ms.max():.1f} ms")


if __name__ == "__main__":
    main()
