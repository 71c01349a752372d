"""Where one contribution's time goes on the coordinator, stage by stage, in one process.

Run: ``.venv/bin/python tests/benchmarks/profile_ingest.py [--tables 100 1000] [--large]
[--db sqlite|postgres] [--cprofile N]``.
Per stage (median of ``--repeat`` runs, milliseconds): JSON parse + schema validation (what
a bare FastAPI endpoint also does), the replay digest, base64, zlib inflate, SHA-256 and the
full ``check_release``; then the whole request through the real app (TestClient, SQLite
file or a private schema of the PostgreSQL test database) with the SQL statements it runs
besides BEGIN, counted by an engine event (SQLite only: on PostgreSQL the hot statements run on
the driver cursor, which the engine's events do not see; ``coordinator.ledger.charge`` lists
them). ``--cprofile N`` prints the N functions with the
most cumulative time in the route's work (the group-commit writer's batches).
"""

from __future__ import annotations

import argparse
import base64
import cProfile
import hashlib
import json
import pstats
import secrets
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
import pybase64
from fastapi.testclient import TestClient
from isal import isal_zlib
from sqlalchemy import event

from common.wire.schemas import ContributionCreate
from coordinator.config import Settings
from coordinator.db.tables import Base
from coordinator.main import create_app
from coordinator.services import group_commit
from coordinator.services.contributions import check_release, request_digest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from coordinator_kit import CoordinatorKit  # noqa: E402
from coordinator_kit import schema_url as _schema_url


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def _profiled(profiler: cProfile.Profile):  # type: ignore[no-untyped-def]
    """``group_commit.run_batch`` that profiles each batch (the writer runs one at a time)."""
    real = group_commit.run_batch

    def run_batch(session, batch):  # type: ignore[no-untyped-def]
        return profiler.runcall(real, session, batch)

    return run_batch


def profile(tables: int, sample: int, repeat: int, db_url: str, top: int) -> None:
    tmp = Path(tempfile.mkdtemp())
    token = secrets.token_urlsafe(32)
    app = create_app(Settings(admin_token=token, database_url=db_url or f"sqlite:///{tmp}/c.db",
                              data_dir=tmp, log_level="WARNING", max_body_bytes=2**25))
    Base.metadata.create_all(app.state.engine)
    statements = [0]

    def count(statement: str) -> None:
        statements[0] += not statement.startswith(("BEGIN", "COMMIT", "ROLLBACK"))

    # the hot statements run on the driver cursor (coordinator.db.driver_sql): count them there
    event.listen(app.state.engine, "connect",
                 lambda dbapi, _record: dbapi.set_trace_callback(count))
    app.state.engine.dispose()
    admin = {"Authorization": f"Bearer {token}"}
    with TestClient(app) as c:
        spec = CoordinatorKit.study_spec("p", n_features=10, n_tables=tables, sample_size=sample)
        signed = c.post("/v1/studies", json=spec, headers=admin).json()["config"]
        who = c.post("/v1/participants", json={"name": "h", "epsilon_cap": "1000000"},
                     headers=admin).json()["token"]
        c.post("/v1/studies/p/members", json={"participant": "h"}, headers=admin)
        template = CoordinatorKit.release(signed, np.random.default_rng(0))[0]
        raw = json.dumps(template).encode()
        body = ContributionCreate.model_validate_json(raw)
        config = CoordinatorKit.config_of(signed)
        packed = pybase64.b64decode(body.lsh.data)
        inflated = isal_zlib.decompress(packed)
        stages = {
            "parse+validate": median_ms(lambda: ContributionCreate.model_validate_json(raw),
                                        repeat),
            "replay digest": median_ms(lambda: request_digest(body), repeat),
            "base64 (stdlib / pybase64)": (
                median_ms(lambda: base64.b64decode(body.lsh.data), repeat),
                median_ms(lambda: pybase64.b64decode(body.lsh.data), repeat)),
            "inflate (zlib / ISA-L)": (median_ms(lambda: zlib.decompress(packed), repeat),
                                       median_ms(lambda: isal_zlib.decompress(packed), repeat)),
            "sha256": median_ms(lambda: hashlib.sha256(inflated).digest(), repeat),
            "check_release": median_ms(lambda: check_release(config, body, 2**30), repeat),
        }
        headers = {"Authorization": f"Bearer {who}", "Content-Type": "application/json"}
        bodies = [json.dumps({**template, "idempotency_key": secrets.token_hex(16)}).encode()
                  for _ in range(repeat)]
        c.post("/v1/studies/p/contributions", content=bodies.pop(), headers=headers)
        statements[0] = 0
        profiler = cProfile.Profile(time.process_time)  # CPU, not waiting
        if top:
            group_commit.run_batch = _profiled(profiler)
        start = time.perf_counter()
        for b in bodies:
            assert c.post("/v1/studies/p/contributions", content=b, headers=headers).is_success
        stages["whole request"] = 1000 * (time.perf_counter() - start) / len(bodies)
        per_request = statements[0] / len(bodies)
    app.state.engine.dispose()
    if top:
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(top)
    cells = config.lsh_cells
    print(f"| {tables} ({cells}) | {len(raw) // 1024} | "
          + " | ".join(f"{v[0]:.2f} / {v[1]:.2f}" if isinstance(v, tuple) else f"{v:.2f}"
                       for v in stages.values())
          + (" | - |" if db_url else f" | {per_request:.0f} |"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", nargs="+", type=int, default=[100, 1000])
    parser.add_argument("--large", action="store_true")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--cprofile", type=int, default=0, metavar="N",
                        help="print the N functions with most cumulative time in the route")
    args = parser.parse_args()
    schema = _schema_url("fedod_prof") if args.db == "postgres" else iter([""])
    db_url = next(schema)
    print("| m (cells) | body KB | parse+validate | replay digest | base64 (stdlib / pybase64) | "
          "inflate (zlib / ISA-L) | sha256 | "
          f"check_release | whole request ({args.db}) | SQL statements |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    cases = [(m, 256) for m in args.tables] + ([(100, 65536)] if args.large else [])
    for tables, sample in cases:
        profile(tables, sample, args.repeat, db_url, args.cprofile)
    next(schema, None)  # drops the PostgreSQL schema


if __name__ == "__main__":
    main()
