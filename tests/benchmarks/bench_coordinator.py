"""Throughput of the coordinator next to a bare FastAPI endpoint, same payloads, same run.

Run: ``.venv/bin/python tests/benchmarks/bench_coordinator.py [--workers 2] [--clients 50]``.
Needs PostgreSQL (FEDOD_TEST_POSTGRES_URL or the default test database). Prints
contributions/s and model GETs/s for both servers and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np
import sqlalchemy as sa
from fastapi import FastAPI, Response

from common.schemas import ContributionCreate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import CoordinatorKit  # noqa: E402

bare_app = FastAPI()
_MODEL = b"{}"


@bare_app.post("/v1/studies/{study_id}/contributions", status_code=201)
def bare_contribution(study_id: str, body: ContributionCreate) -> dict[str, str]:
    """Validate the same payload and discard it."""
    return {"status": "discarded"}


@bare_app.get("/v1/studies/{study_id}/model")
def bare_model(study_id: str) -> Response:
    return Response(_MODEL, media_type="application/json")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen) -> None:
    for _ in range(300):
        if proc.poll() is not None:
            raise RuntimeError("server exited")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError("server not ready")


async def hammer(base: str, requests: list[tuple[str, str, dict | None, dict]], clients: int):
    """Send ``requests`` (method, path, json, headers) with ``clients`` concurrent workers."""
    queue: asyncio.Queue = asyncio.Queue()
    for r in requests:
        queue.put_nowait(r)
    statuses: dict[int, int] = {}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as client:

        async def worker() -> None:
            while not queue.empty():
                method, path, body, headers = queue.get_nowait()
                r = await client.request(method, path, json=body, headers=headers)
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.perf_counter() - start
    return len(requests) / elapsed, statuses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--contributions", type=int, default=1000)
    parser.add_argument("--gets", type=int, default=3000)
    args = parser.parse_args()
    base_pg = os.environ.get(
        "FEDOD_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    )
    schema = f"fedod_b_{secrets.token_hex(4)}"
    engine = sa.create_engine(base_pg)
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    db_url = f"{base_pg}?options={quote(f'-csearch_path={schema}')}"
    token = secrets.token_urlsafe(32)
    tmp = tempfile.mkdtemp()
    env = {**os.environ, "FEDOD_DATABASE_URL": db_url, "FEDOD_ADMIN_TOKEN": token,
           "FEDOD_DATA_DIR": tmp, "FEDOD_LOG_LEVEL": "WARNING"}
    cport, bport = free_port(), free_port()
    coord = subprocess.Popen([sys.executable, "-m", "coordinator.cli", "serve", "--port",
                              str(cport), "--workers", str(args.workers)], env=env,
                             start_new_session=True, stderr=subprocess.DEVNULL)
    bare = subprocess.Popen([sys.executable, "-m", "uvicorn", "--app-dir",
                             str(Path(__file__).parent), "bench_coordinator:bare_app",
                             "--port", str(bport), "--workers", str(args.workers),
                             "--log-level", "warning"], start_new_session=True)
    try:
        curl, burl = f"http://127.0.0.1:{cport}", f"http://127.0.0.1:{bport}"
        wait_ready(curl + "/readyz", coord)
        wait_ready(burl + "/docs", bare)
        admin = {"Authorization": f"Bearer {token}"}
        kit, rng = CoordinatorKit, np.random.default_rng(0)
        with httpx.Client(base_url=curl, headers=admin, timeout=60) as c:
            spec = kit.study_spec("bench", n_features=10, n_tables=100, sample_size=256)
            signed = c.post("/v1/studies", json=spec).json()["config"]
            tokens = []
            for i in range(args.clients):
                r = c.post("/v1/participants", json={"name": f"p{i}", "epsilon_cap": "100000"})
                tokens.append(r.json()["token"])
                c.post("/v1/studies/bench/members", json={"participant": f"p{i}"})
        bodies = [kit.release(signed, rng)[0] for _ in range(args.contributions)]
        size = len(ContributionCreate(**bodies[0]).model_dump_json())
        post = [("POST", "/v1/studies/bench/contributions", b,
                 {"Authorization": f"Bearer {tokens[i % len(tokens)]}"})
                for i, b in enumerate(bodies)]
        gets = [("GET", "/v1/studies/bench/model", None,
                 {"Authorization": f"Bearer {tokens[i % len(tokens)]}"})
                for i in range(args.gets)]
        global _MODEL
        model = httpx.get(curl + "/v1/studies/bench/model", headers=admin).content
        print(f"payload {size} bytes, model {len(model)} bytes, {args.clients} clients, "
              f"{args.workers} workers each")
        results = {}
        for name, url in (("coordinator", curl), ("bare", burl)):
            results[name] = (asyncio.run(hammer(url, post, args.clients)),
                             asyncio.run(hammer(url, gets, args.clients)))
        for name, ((p, ps), (g, gs)) in results.items():
            print(f"{name:12s} contributions/s {p:8.1f} {ps}   model GETs/s {g:8.1f} {gs}")
        (cp, _), (cg, _) = results["coordinator"]
        (bp, _), (bg, _) = results["bare"]
        print(f"ratio coordinator/bare: contributions {cp / bp:.2f}, model GETs {cg / bg:.2f}")
    finally:
        for proc in (coord, bare):
            os.killpg(proc.pid, 15)
            proc.wait()
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))


if __name__ == "__main__":
    main()
