"""Benchmark (issue 15, item 4): time from config GET to POST, by row count, with and without
the send slot.

Run: ``.venv/bin/python tests/benchmarks/bench_send_slot.py [--rows 1000 1000000] [--slot 10]``

For each row count, one participant (``Agent.contribute``, real clock and sleep) releases a
CSV of that many records (LSH iTables, 100 tables, plus a dense 4**3 grid) to a coordinator
answered by ``httpx.MockTransport``, which records when the config GET and the POST arrive.
Baseline: ``send_slot=0`` (send as soon as the body is ready, the behaviour before the fix);
then ``send_slot=--slot``. Prints GET-to-POST seconds side by side; with the slot they should
all equal the slot (to scheduling jitter) as long as reading fits in it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "participant"))

from release_kit import FakeCoordinator  # noqa: E402

from common.study.config import GridParams, PrivacyParams, new_study_config  # noqa: E402
from common.study.signing import key_fingerprint, sign_config  # noqa: E402
from participant.agent import Agent, DataOptions  # noqa: E402


def write_csv(path: Path, rows: int) -> None:
    rng = np.random.default_rng(0)
    with path.open("w") as fh:
        fh.write("a,b,c\n")
        for start in range(0, rows, 200_000):
            X = rng.uniform(0, 1, size=(min(200_000, rows - start), 3))
            np.savetxt(fh, X, delimiter=",", fmt="%.6f")


def get_to_post(rows: int, slot: float, data: Path, workdir: Path) -> float:
    fake = FakeCoordinator()
    fake.config = new_study_config(
        "s1", fake.config.features, n_tables=100, grid=GridParams(bins=4, k=5),
        privacy=PrivacyParams(epsilon_lsh="1", epsilon_grid="0.5"))
    fake.signed = sign_config(fake.config, fake.key)
    seen: dict[str, float] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen[request.method] = time.monotonic()
        return fake(request)

    agent = Agent(workdir / f"state-{rows}-{slot}", transport=httpx.MockTransport(handler))
    agent.enrol("http://coord.test", "tok", key_fingerprint(fake.key), epsilon_cap="100")
    outcome = agent.contribute("s1", data, DataOptions(), send_slot=slot)
    assert outcome.sent and rows > 0
    return seen["POST"] - seen["GET"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000, 1_000_000])
    parser.add_argument("--slot", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        print(f"| rows | GET->POST, no slot (baseline) | GET->POST, slot {args.slot:g} s |")
        print("|---:|---:|---:|")
        for rows in args.rows:
            data = work / f"d{rows}.csv"
            write_csv(data, rows)
            base = get_to_post(rows, 0.0, data, work)
            slotted = get_to_post(rows, args.slot, data, work)
            print(f"| {rows:,} | {base:.3f} s | {slotted:.3f} s |", flush=True)


if __name__ == "__main__":
    main()
