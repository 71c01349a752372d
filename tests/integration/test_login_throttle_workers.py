"""The dashboard login throttle holds across uvicorn workers (4 workers, one PostgreSQL).

Each of the 4 workers answers wrong logins on its own kept-alive connection, all at once;
together they let exactly ``FEDOD_LOGIN_ATTEMPTS_PER_MINUTE`` through (401) and refuse the rest
(429), and then refuse the right token on every worker. The window is set to an hour so that
nothing depends on how long the attempts take.
"""

from __future__ import annotations

import collections
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlencode

import pytest
from worker_procs import connection_per_worker, workers_of

pytestmark = pytest.mark.postgres
WORKERS = 4
LIMIT = 10
TRIES_PER_WORKER = 8


def post_login(conn, token: str) -> int:
    body = urlencode({"token": token})
    conn.request("POST", "/admin/login", body=body,
                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    response = conn.getresponse()
    response.read()
    return response.status


def test_failed_logins_are_throttled_across_workers(coordinator_server, fresh_postgres_url,
                                                    monkeypatch):
    monkeypatch.setenv("FEDOD_LOGIN_ATTEMPTS_PER_MINUTE", str(LIMIT))
    monkeypatch.setenv("FEDOD_LOGIN_WINDOW_S", "3600")
    monkeypatch.setenv("FEDOD_KEEP_ALIVE_TIMEOUT_S", "3600")  # the connections stay with us
    server = coordinator_server(fresh_postgres_url, workers=WORKERS)
    conns = connection_per_worker(server.port, workers_of(server.proc.pid, WORKERS))
    start = threading.Barrier(WORKERS)

    def attempts(pid: int) -> list[tuple[int, int]]:
        start.wait()
        return [(pid, post_login(conns[pid], "wrong")) for _ in range(TRIES_PER_WORKER)]

    with ThreadPoolExecutor(WORKERS) as pool:
        answers = [a for batch in pool.map(attempts, conns) for a in batch]
    statuses = collections.Counter(status for _, status in answers)
    per_worker = collections.Counter(pid for pid, status in answers if status == 401)
    print(f"\n{len(answers)} wrong logins over {WORKERS} workers: {dict(statuses)}; "
          f"401s per worker {sorted(per_worker.values())}")
    assert statuses == {401: LIMIT, 429: WORKERS * TRIES_PER_WORKER - LIMIT}, statuses
    assert [post_login(conn, server.admin_token) for conn in conns.values()] == [429] * WORKERS
    for conn in conns.values():
        conn.close()
