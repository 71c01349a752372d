"""Coordinator ingest next to a bare FastAPI endpoint taking the same body, in the same run.

Run: ``.venv/bin/python tests/benchmarks/bench_coordinator.py [--db sqlite postgres]
[--tables 100 1000] [--merged 1 100 10000] [--workers 1 2] [--large]``. PostgreSQL comes from
FEDOD_TEST_POSTGRES_URL or the default test database (a private schema, dropped after).

For each database, table count m and number N of contributions already merged, it prints
contributions/s and model GETs/s of the coordinator and of the bare server (same request
bytes; the bare GET serves a body of the coordinator model's size), their ratio, and the
server CPU per request of both (so a loaded machine or the client cannot fake the ratio),
and the CPU the PostgreSQL server's processes used meanwhile (on this machine they share the
cores with both servers; with SQLite the column shows PostgreSQL idling). "CPU ratio" is the
bare server's CPU per request over the coordinator's plus PostgreSQL's: the ratio the two
rates approach once the machine's cores are the limit, and a figure that moves far less
between runs than the rates do.
The posts alternate ``--rounds`` times between the two servers and each figure is the
median over the rounds (single short phases moved the ratio by 2x from one run to the next).
Each ``--workers`` value is a run of both servers with that many uvicorn workers. With 2, the
column "busiest worker's CPU share" says how evenly the connections fell: uvicorn's workers
share one listening socket and asyncio accepts every pending connection at once, so 8
keep-alive connections often land 8 / 0 or 6 / 2 (share near 1.0), and then one worker's core
caps the server, bare or coordinator alike; 1 worker compares the two servers without that
luck. Each ``--clients`` value is a measurement with that many keep-alive connections
(participants): with 8 the bare server is CPU-bound, while the coordinator still waits for
its commits (each batch is answered after its fsync), so 32 is where both are saturated.
The connection counts of a case share its study, so "merged before" is the state before the
first of them.
The load client is a raw keep-alive HTTP/1.1 client on asyncio streams with prebuilt request
bytes, not httpx, spread over ``--client-processes`` forked processes (2) so that one client
event loop cannot cap the bare server's rate; its CPU per request is printed, and a dropped
connection is counted (as status 0 in "non-2xx") and reopened. Both servers run through
``coordinator.server.run`` (uvicorn with TCP_NODELAY on multi-worker sockets; without it every
response of either server stalled 40 ms and the ratio measured that stall).
``N`` is reached fast by inserting contributions of an all-zero release straight into the
tables (their sum is zero, so the stored snapshot stays exact): real rows in every table and
index ingest touches.
``--large`` adds m = 100 tables of a 65,536-record sample (822k cells, a 1.5 MB body).
Where one contribution's time goes, stage by stage: ``tests/benchmarks/profile_ingest.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np
import sqlalchemy as sa
from fastapi import FastAPI, Response

from common.wire.encoding import encode_counts
from common.wire.schemas import ContributionCreate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from coordinator_kit import CoordinatorKit  # noqa: E402

bare_app = FastAPI()
MODEL_DIR = Path(os.environ.get("BENCH_MODEL_DIR", tempfile.gettempdir()))
_models: dict[str, tuple[float, bytes]] = {}


@bare_app.post("/v1/studies/{study_id}/contributions", status_code=201)
def bare_contribution(study_id: str, body: ContributionCreate) -> dict[str, str]:
    """Parse and validate the same payload, then discard it."""
    return {"status": "discarded", "key": body.idempotency_key}


@bare_app.get("/v1/studies/{study_id}/model")
def bare_model(study_id: str) -> Response:
    """Serve a stored copy of the coordinator's model (same bytes, kept in memory)."""
    path = MODEL_DIR / f"{study_id}.json"
    mtime = path.stat().st_mtime
    if study_id not in _models or _models[study_id][0] != mtime:
        _models[study_id] = (mtime, path.read_bytes())
    return Response(_models[study_id][1], media_type="application/json")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen) -> None:
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError("server exited")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError("server not ready")


def _cpu(wanted: Callable[[str, int], bool]) -> dict[int, float]:
    """User + system CPU seconds of each live process whose (name, process group) is
    ``wanted``."""
    tick, cpu = os.sysconf("SC_CLK_TCK"), {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            head, rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)
        except OSError:
            continue
        fields = rest.split()
        if wanted(head.split("(", 1)[1], int(fields[2])):
            cpu[int(pid)] = (int(fields[11]) + int(fields[12])) / tick
    return cpu


def group_cpu(pgid: int) -> dict[int, float]:
    """CPU seconds of each process in a process group (a server and its workers)."""
    return _cpu(lambda _name, group: group == pgid)


def postgres_cpu() -> float:
    """CPU seconds of every PostgreSQL server process on this machine."""
    return sum(_cpu(lambda name, _group: name == "postgres").values())


def http_request(method: str, path: str, port: int, token: str, body: bytes = b"") -> bytes:
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n")
    if body:
        head += "Content-Type: application/json\r\n"
    return head.encode() + b"\r\n" + body


async def _connection(port: int, requests: list[bytes], statuses: dict[int, int]) -> None:
    """Send ``requests`` in order on one keep-alive connection; a dropped connection is
    counted (status 0) and reopened, so one reset does not end the run."""
    pending = list(reversed(requests))
    while pending:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            statuses[0] = statuses.get(0, 0) + 1
            pending.pop()
            continue
        try:
            while pending:
                writer.write(pending[-1])
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head[9:12])
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                await reader.readexactly(length)
                statuses[status] = statuses.get(status, 0) + 1
                pending.pop()
        except (OSError, asyncio.IncompleteReadError):
            statuses[0] = statuses.get(0, 0) + 1
            pending.pop()  # not retried: a lost contribution may have been stored
        finally:
            writer.close()


def _client(port: int, per_connection: list[list[bytes]]) -> dict:
    """One client process: its connections on one event loop; its own clock and CPU."""
    statuses: dict[int, int] = {}

    async def run() -> None:
        await asyncio.gather(*(_connection(port, reqs, statuses) for reqs in per_connection))

    cpu, start = time.process_time(), time.monotonic()
    asyncio.run(run())
    return {"statuses": statuses, "start": start, "end": time.monotonic(),
            "cpu": time.process_time() - cpu}


CLIENT_PROCESSES = 2


def hammer(port: int, pgid: int, per_connection: list[list[bytes]]) -> dict:
    """Send each list on its own keep-alive connection from ``CLIENT_PROCESSES`` forked
    client processes; rate (all requests over first start to last end, one system-wide
    monotonic clock), statuses, server and client CPU per request."""
    n = sum(map(len, per_connection))
    procs = min(CLIENT_PROCESSES, len(per_connection))
    shares = [per_connection[i::procs] for i in range(procs)]
    cpu0, db0 = group_cpu(pgid), postgres_cpu()
    with multiprocessing.get_context("fork").Pool(procs) as pool:
        parts = pool.starmap(_client, [(port, share) for share in shares])
    db_cpu = postgres_cpu() - db0
    used = {pid: t - cpu0.get(pid, 0.0) for pid, t in group_cpu(pgid).items()}
    server_cpu = sum(used.values())
    statuses: dict[int, int] = {}
    for part in parts:
        for status, count in part["statuses"].items():
            statuses[status] = statuses.get(status, 0) + count
    elapsed = max(p["end"] for p in parts) - min(p["start"] for p in parts)
    return {"rate": n / elapsed, "statuses": statuses, "server_ms": 1000 * server_cpu / n,
            "client_ms": 1000 * sum(p["cpu"] for p in parts) / n,
            "busiest": max(used.values()) / server_cpu if server_cpu else 1.0,
            "db_ms": 1000 * db_cpu / n}


class Coordinator:
    """A real ``fedod-coordinator serve`` (``workers`` workers) on a fresh SQLite file or PG
    schema."""

    def __init__(self, db: str, workers: int, tmp: Path) -> None:
        self.token, self.schema, self.base_pg = secrets.token_urlsafe(32), None, None
        tmp.mkdir(parents=True, exist_ok=True)
        if db == "sqlite":
            self.url = f"sqlite:///{tmp / 'coordinator.db'}"
        else:
            self.base_pg = os.environ.get(
                "FEDOD_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
            self.schema = f"fedod_b_{secrets.token_hex(4)}"
            with sa.create_engine(self.base_pg).begin() as conn:
                conn.execute(sa.text(f'CREATE SCHEMA "{self.schema}"'))
            self.url = f"{self.base_pg}?options={quote(f'-csearch_path={self.schema}')}"
        env = {**os.environ, "FEDOD_DATABASE_URL": self.url, "FEDOD_ADMIN_TOKEN": self.token,
               "FEDOD_DATA_DIR": str(tmp), "FEDOD_LOG_LEVEL": "WARNING",
               "FEDOD_MAX_BODY_BYTES": str(16 * 2**20)}
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "coordinator.cli.main", "serve", "--port", str(self.port),
             "--workers", str(workers)], env=env, start_new_session=True,
            stderr=subprocess.DEVNULL)
        wait_ready(f"http://127.0.0.1:{self.port}/readyz", self.proc)
        self.engine = sa.create_engine(self.url)

    def admin(self) -> httpx.Client:
        return httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=300,
                            headers={"Authorization": f"Bearer {self.token}"})

    def close(self) -> None:
        os.killpg(self.proc.pid, 15)
        self.proc.wait()
        self.engine.dispose()
        if self.schema:
            with sa.create_engine(self.base_pg).begin() as conn:
                conn.execute(sa.text(f'DROP SCHEMA "{self.schema}" CASCADE'))


def prepopulate(coord: Coordinator, study: str, n: int, cells: int) -> None:
    """Add ``n`` merged contributions of an all-zero release (one filler participant each)."""
    from coordinator.db.tables import (
        Aggregate,
        AggregateSnapshot,
        Contribution,
        LedgerEntry,
        Participant,
    )

    payload = encode_counts(np.zeros(cells, dtype=np.int64), n_cells=cells).model_dump_json()
    tag = secrets.token_hex(3)
    with coord.engine.begin() as conn:
        old = conn.execute(sa.update(Aggregate).where(Aggregate.study_id == study).values(
            version=Aggregate.version + n, contributors=Aggregate.contributors + n)
            .returning(Aggregate.version)).scalar_one() - n
        folded = conn.execute(sa.update(AggregateSnapshot).where(
            AggregateSnapshot.study_id == study, AggregateSnapshot.version == old).values(
            version=old + n, contributors=AggregateSnapshot.contributors + n)).rowcount
        assert folded == 1, "read the model (fold) before pre-populating"
        ids = conn.execute(sa.insert(Participant).returning(Participant.id), [
            {"name": f"fill-{tag}-{i}", "token_hash": secrets.token_hex(32), "active": True,
             "eps_cap": 10**9, "delta_cap": 0, "eps_spent": 5 * 10**8, "delta_spent": 0}
            for i in range(n)]).scalars().all()
        rows = [{"study_id": study, "participant_id": pid, "idempotency_key": f"fill{i:08d}",
                 "request_sha256": "0" * 64, "config_version": 1, "eps_units": 5 * 10**8,
                 "delta_units": 0, "lsh_payload": payload, "model_version": old + 1 + i}
                for i, pid in enumerate(ids)]
        cids = conn.execute(sa.insert(Contribution).returning(Contribution.id),
                            rows).scalars().all()
        conn.execute(sa.insert(LedgerEntry), [
            {"participant_id": pid, "contribution_id": cid, "study_id": study, "kind": "lsh",
             "eps_units": 5 * 10**8, "delta_units": 0} for pid, cid in zip(ids, cids, strict=True)])


def release_bytes(signed: dict, n: int, distinct: int = 4) -> list[bytes]:
    """``n`` request bodies with fresh keys over ``distinct`` noisy-looking count vectors."""
    rng = np.random.default_rng(0)
    templates = [CoordinatorKit.release(signed, rng)[0] for _ in range(distinct)]
    return [json.dumps({**templates[i % distinct], "idempotency_key": secrets.token_hex(16)})
            .encode() for i in range(n)]


def setup_study(coord: Coordinator, study: str, tables: int, sample: int, clients: int):
    with coord.admin() as c:
        spec = CoordinatorKit.study_spec(study, n_features=10, n_tables=tables,
                                         sample_size=sample)
        r = c.post("/v1/studies", json=spec)
        assert r.status_code == 201, r.text
        signed, tokens = r.json()["config"], []
        for i in range(clients):
            r = c.post("/v1/participants", json={"name": f"{study}-p{i}",
                                                 "epsilon_cap": "1000000"})
            tokens.append(r.json()["token"])
            c.post(f"/v1/studies/{study}/members", json={"participant": f"{study}-p{i}"})
    return signed, tokens


def measure(coord: Coordinator, bare: tuple[int, int], study: str, signed: dict,
            tokens: list[str], posts: int, gets: int, rounds: int) -> dict:
    """One case: ``rounds`` alternations of ``posts`` contributions to the coordinator and
    to the bare server (the first of the pair alternates), then ``gets`` model reads of
    each. Each figure is the median over the rounds, so one slow moment of this shared
    machine moves one round, not the result."""
    path = f"/v1/studies/{study}/contributions"
    servers = [("coord", coord.port, coord.proc.pid), ("bare", *bare)]
    runs: dict[str, list[dict]] = {"coord_post": [], "bare_post": []}
    for i in range(rounds):
        bodies = release_bytes(signed, posts)
        for name, port, pgid in servers[::-1] if i % 2 else servers:
            conns = [[http_request("POST", path, port, tok, b) for b in bodies[j::len(tokens)]]
                     for j, tok in enumerate(tokens)]
            runs[f"{name}_post"].append(hammer(port, pgid, conns))
    out = {"body_kb": len(bodies[0]) / 1024, **{k: median_run(v) for k, v in runs.items()}}
    with coord.admin() as c:
        start = time.perf_counter()
        model = c.get(f"/v1/studies/{study}/model").content
        out["fold_ms"] = 1000 * (time.perf_counter() - start)
    (MODEL_DIR / f"{study}.json").write_bytes(model)
    out["model_kb"] = len(model) / 1024
    mpath = f"/v1/studies/{study}/model"
    for name, port, pgid in servers:
        conns = [[http_request("GET", mpath, port, tok)] * (gets // len(tokens)) for tok in tokens]
        out[f"{name}_get"] = hammer(port, pgid, conns)
    return out


def median_run(runs: list[dict]) -> dict:
    """Median rate, server and client CPU over rounds; statuses summed."""
    statuses: dict[int, int] = {}
    for run in runs:
        for status, count in run["statuses"].items():
            statuses[status] = statuses.get(status, 0) + count
    return {"statuses": statuses, **{k: statistics.median(run[k] for run in runs)
                                     for k in ("rate", "server_ms", "client_ms", "busiest",
                                               "db_ms")}}


HEADER = ("| db | workers | connections | m (cells) | merged before | body KB | "
          "coordinator c/s | bare c/s | "
          "ratio | server CPU ms/req coord / bare | PostgreSQL CPU ms/req | CPU ratio | "
          "busiest worker's CPU share coord / bare | "
          "client CPU ms/req | first GET (fold) ms | model KB | GETs/s coord / bare | "
          "GET ratio |")


def row(db: str, workers: int, clients: int, label: str, merged: int, r: dict) -> str:
    cp, bp, cg, bg = r["coord_post"], r["bare_post"], r["coord_get"], r["bare_get"]
    bad = {k: v for x in (cp, bp, cg, bg) for k, v in x["statuses"].items() if k >= 300}
    return (f"| {db} | {workers} | {clients} | {label} | {merged} | {r['body_kb']:.0f} | "
            f"{cp['rate']:.1f} | "
            f"{bp['rate']:.1f} | **{cp['rate'] / bp['rate']:.2f}** | "
            f"{cp['server_ms']:.2f} / {bp['server_ms']:.2f} | {cp['db_ms']:.2f} | "
            f"{bp['server_ms'] / (cp['server_ms'] + cp['db_ms']):.2f} | "
            f"{cp['busiest']:.2f} / {bp['busiest']:.2f} | {cp['client_ms']:.2f} | "
            f"{r['fold_ms']:.0f} | {r['model_kb']:.0f} | {cg['rate']:.0f} / {bg['rate']:.0f} | "
            f"{cg['rate'] / bg['rate']:.2f} |" + (f" non-2xx: {bad}" if bad else ""))


def main() -> None:
    global CLIENT_PROCESSES
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgres"])
    parser.add_argument("--tables", nargs="*", type=int, default=[100, 1000],
                        help="table counts m (none: only --large)")
    parser.add_argument("--merged", nargs="+", type=int, default=[1, 100, 10000])
    parser.add_argument("--large", action="store_true", help="add m=100 x 65,536-record tables")
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2],
                        help="uvicorn workers of both servers (each value is a run)")
    parser.add_argument("--clients", nargs="+", type=int, default=[8, 32],
                        help="keep-alive connections, one participant each (each value is a "
                        "measurement)")
    parser.add_argument("--client-processes", type=int, default=CLIENT_PROCESSES,
                        help="client processes the connections are spread over")
    parser.add_argument("--posts", type=int, default=1500,
                        help="contributions per round and server (m=100; fewer for larger m)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="coordinator / bare alternations per case (medians reported)")
    parser.add_argument("--gets", type=int, default=400)
    args = parser.parse_args()
    CLIENT_PROCESSES = args.client_processes
    tmp = Path(tempfile.mkdtemp())
    os.environ["BENCH_MODEL_DIR"] = str(MODEL_DIR)
    cases = [(m, 256, merged) for m in args.tables for merged in args.merged]
    if args.large:
        cases.append((100, 65536, 1))
    print(HEADER)
    print("|" + "---|" * (HEADER.count("|") - 1))
    for workers in args.workers:
        run_workers(workers, cases, tmp / f"w{workers}", args)


def run_workers(workers: int, cases: list, tmp: Path, args) -> None:
    """Both servers with ``workers`` uvicorn workers; every database and case."""
    bport = free_port()
    launch = (f"from coordinator import server; server.run('bench_coordinator:bare_app', "
              f"port={bport}, workers={workers}, log_level='warning', access_log=False)")
    bare = subprocess.Popen([sys.executable, "-c", launch], start_new_session=True,
                            cwd=Path(__file__).parent,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    try:
        wait_ready(f"http://127.0.0.1:{bport}/docs", bare)
        for db in args.db:
            coord = Coordinator(db, workers, tmp / db)
            try:
                run_db(coord, db, workers, cases, (bport, bare.pid), args)
            finally:
                coord.close()
    finally:
        os.killpg(bare.pid, 15)
        bare.wait()


def run_db(coord: Coordinator, db: str, workers: int, cases: list, bare: tuple[int, int],
           args) -> None:
    """One study per case: ``merged`` contributions already merged, then measure."""
    for m, sample, merged in cases:
        study = f"m{m}s{sample}n{merged}"
        signed, tokens = setup_study(coord, study, m, sample, max(args.clients))
        with coord.admin() as c:  # one real merged contribution, read (folded)
            body = json.loads(release_bytes(signed, 1)[0])
            r = c.post(f"/v1/studies/{study}/contributions", json=body,
                       headers={"Authorization": f"Bearer {tokens[0]}"})
            assert r.status_code == 201, r.text
            c.get(f"/v1/studies/{study}/model")
        cells = CoordinatorKit.config_of(signed).lsh_cells
        if merged > 1:
            prepopulate(coord, study, merged - 1, cells)
        scale = max(1, cells // 10_000)
        for clients in args.clients:
            posts, gets = (max(clients, n // scale) for n in (args.posts, args.gets))
            r = measure(coord, bare, study, signed, tokens[:clients], posts, gets, args.rounds)
            print(row(db, workers, clients, f"{m} ({cells})", merged, r), flush=True)


if __name__ == "__main__":
    main()
