"""A real ``fedod-coordinator serve`` against hostile sockets and a frozen database.

- 2,000 idle and slow-header sockets held open: ``/healthz`` still answers; the server closes
  them after the header timeout; a stalled body gets 408 after the body timeout.
- A PostgreSQL this test starts itself (never the shared one), frozen with SIGSTOP: ``/healthz``
  answers, ``/readyz`` and the API answer 503 with ``Retry-After``; all recovers after SIGCONT.
Nothing here asserts a duration: timeouts are configured small, clients wait generously.
"""

from __future__ import annotations

import contextlib
import glob
import os
import select
import selectors
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from worker_procs import children

pytestmark = pytest.mark.slow
N_SOCKETS = 2000


def open_sockets(port: int, n: int) -> list[socket.socket]:
    """Half idle (nothing sent), half stuck in the middle of a request head."""
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        if i % 2:
            s.sendall(b"GET /v1/key HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        socks.append(s)
    return socks


def wait_closed_by_server(socks: list[socket.socket], timeout_s: float = 180) -> int:
    """Wait until the server closes each socket (EOF); return how many it closed."""
    sel = selectors.DefaultSelector()
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    closed = 0
    while closed < len(socks):
        events = sel.select(timeout_s)
        if not events:
            break
        for key, _ in events:
            try:
                data = key.fileobj.recv(4096)
            except ConnectionResetError:
                data = b""
            if not data:
                sel.unregister(key.fileobj)
                closed += 1
    sel.close()
    return closed


def still_open(socks: list[socket.socket]) -> int:
    """How many of these sockets are quiet: nothing to read, no EOF, no error from the server."""
    poller = select.poll()
    for s in socks:
        poller.register(s, select.POLLIN)
    return len(socks) - len(poller.poll(0))


def test_idle_and_slow_sockets_do_not_starve_healthz(coordinator_server, tmp_path, monkeypatch,
                                                     capsys):
    monkeypatch.setenv("FEDOD_HEADER_TIMEOUT_S", "30")
    monkeypatch.setenv("FEDOD_BODY_TIMEOUT_S", "2")
    monkeypatch.setenv("FEDOD_LIMIT_CONCURRENCY", "4000")
    server = coordinator_server(f"sqlite:///{tmp_path / 'c.db'}", workers=1)
    socks = open_sockets(server.port, N_SOCKETS)
    try:
        started = time.perf_counter()
        r = httpx.get(server.url + "/healthz", timeout=30)
        answered_s = time.perf_counter() - started
        assert r.status_code == 200 and r.json() == {"status": "ok"}
        assert still_open(socks) == N_SOCKETS  # healthz answered while all of them were held
        with capsys.disabled():
            print(f"\n/healthz answered in {answered_s * 1000:.0f} ms with {N_SOCKETS} idle "
                  "and slow-header sockets open (printed, not asserted: the machine is shared)")
        assert httpx.get(server.url + "/v1/key", timeout=30).status_code == 200
        stalled = socket.create_connection(("127.0.0.1", server.port), timeout=120)
        stalled.sendall(b"POST /v1/studies HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer stalled\r\n"
                        b"Content-Type: application/json"
                        b"\r\nContent-Length: 1000000\r\n\r\n" + b"{" * 1000)
        answer = b""
        while chunk := stalled.recv(4096):  # 408, then the server closes the connection
            answer += chunk
        stalled.close()
        assert answer.startswith(b"HTTP/1.1 408 ") and b"FEDOD_BODY_TIMEOUT_S" in answer
        closed = wait_closed_by_server(socks)
        assert closed == N_SOCKETS, f"only {closed} of {N_SOCKETS} closed by the header timeout"
        assert httpx.get(server.url + "/healthz", timeout=30).status_code == 200
    finally:
        for s in socks:
            s.close()
    log = server.log.read_text()
    assert log.count("Traceback") == 0, log[-3000:]


def _pg_bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


def signal_server(pid: int, sig: int) -> None:
    """Signal the postmaster and every backend (each backend has its own session)."""
    for target in [pid, *children(pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, sig)


def _as_postgres_user() -> dict:
    """initdb refuses to run as root: run the private server as the ``postgres`` user then."""
    if os.geteuid() != 0:
        return {}
    import pwd

    pw = pwd.getpwnam("postgres")
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


@pytest.fixture
def own_postgres():
    """A private PostgreSQL (initdb in tmp, own port, default max_connections); stopped after.

    Its postmaster and backends form their own process group, which the test freezes.
    """
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries not installed (/usr/lib/postgresql/*/bin)")
    as_user = _as_postgres_user()
    root = tempfile.mkdtemp(prefix="fedod-pg-")
    if as_user:
        os.chown(root, as_user["user"], as_user["group"])
    data = os.path.join(root, "data")
    subprocess.run([f"{bin_dir}/initdb", "-D", data, "-U", "postgres", "-A", "trust"],
                   check=True, capture_output=True, timeout=300, **as_user)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(os.path.join(root, "pg.log"), "wb") as log:
        proc = subprocess.Popen(
            [f"{bin_dir}/postgres", "-D", data, "-p", str(port), "-k", root,
             "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"],
            stdout=subprocess.DEVNULL, stderr=log, start_new_session=True, **as_user)
    ready = [f"{bin_dir}/pg_isready", "-h", "127.0.0.1", "-p", str(port), "-t", "10"]
    try:
        while subprocess.run(ready, capture_output=True, timeout=60).returncode != 0:
            assert proc.poll() is None, Path(root, "pg.log").read_text()
            time.sleep(0.2)  # polling for the server to come up, not a timing assertion
        yield proc, f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        signal_server(proc.pid, signal.SIGCONT)
        proc.send_signal(signal.SIGINT)  # fast shutdown: do not wait for clients to leave
        proc.wait(timeout=120)
        shutil.rmtree(root, ignore_errors=True)


def test_frozen_database_answers_503_and_recovers(coordinator_server, own_postgres, monkeypatch):
    pg, url = own_postgres
    monkeypatch.setenv("FEDOD_DB_TIMEOUT_S", "2")
    monkeypatch.setenv("FEDOD_REQUEST_TIMEOUT_S", "3")
    server = coordinator_server(url, workers=2)
    admin = {"Authorization": f"Bearer {server.admin_token}"}
    with httpx.Client(base_url=server.url, headers=admin, timeout=60) as c:
        r = c.post("/v1/participants", json={"name": "h1", "epsilon_cap": "1"})
        assert r.status_code == 201, r.text
        signal_server(pg.pid, signal.SIGSTOP)
        try:
            with ThreadPoolExecutor(60) as pool:  # more API calls than the worker has threads
                api = list(pool.map(lambda _: c.get("/v1/admin/budget"), range(60)))
                assert c.get("/healthz").status_code == 200
            assert c.get("/healthz").json() == {"status": "ok"}
            ready = c.get("/readyz")
            assert ready.status_code == 503 and ready.headers["retry-after"] == "5"
            assert {r.status_code for r in api} == {503}, {r.status_code for r in api}
            assert all(r.headers["retry-after"] == "5" for r in api)
        finally:
            signal_server(pg.pid, signal.SIGCONT)
        deadline = time.monotonic() + 300  # a hang guard only: the loop ends on readiness
        while c.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "not ready again after SIGCONT"
            time.sleep(0.2)
        budget = c.get("/v1/admin/budget")
        assert budget.status_code == 200 and budget.json()[0]["participant"] == "h1"
