"""Uploads that stall mid-body are dropped after the body timeout and their memory is freed.

Against a real ``fedod-coordinator serve`` (2 workers): 100 contribution uploads each declare
a body of 4 MB, send 1 MB of it and stall. Every trigger is an observed event: "during" is
measured once the workers have read every byte sent (the server ends of the connections have
empty receive queues in ``/proc/net/tcp``), "after" once the server has answered each upload
408, closed its socket, and the workers have logged freeing the memory of all 100 bodies.
The workers' resident memory (``VmRSS``) must return to within ``AFTER_BOUND_KIB`` of the
baseline after having held the stalled bodies.
"""

from __future__ import annotations

import json
import selectors
import socket
import time
from pathlib import Path

import httpx
import pytest
from worker_procs import rss_kib, workers_of

pytestmark = pytest.mark.slow
WORKERS = 2
UPLOADS = 100
DECLARED = 4 * 1024 * 1024
SENT = 1024 * 1024
AFTER_BOUND_KIB = 24 * 1024  # at most 24 MiB above the baseline once the 100 MiB are dropped


def unread_bytes(port: int, client_ports: set[int]) -> int:
    """Bytes sent by these client ports that the server has not read yet (its rx queues)."""
    total = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].rsplit(":", 1)[1], 16)
        remote_port = int(fields[2].rsplit(":", 1)[1], 16)
        if local_port == port and remote_port in client_ports:
            total += int(fields[4].split(":")[1], 16)
    return total


def answers_then_close(socks: list[socket.socket]) -> list[bytes]:
    """Read every socket until the server closes it; return what each received."""
    received = {s: b"" for s in socks}
    sel = selectors.DefaultSelector()
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    open_count = len(socks)
    while open_count:
        events = sel.select(300)  # a hang guard: the server's own timeout closes them
        assert events, f"{open_count} stalled uploads still open"
        for key, _ in events:
            try:
                chunk = key.fileobj.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if chunk:
                received[key.fileobj] += chunk
            else:
                sel.unregister(key.fileobj)
                open_count -= 1
    sel.close()
    return [received[s] for s in socks]


def reclaimed(log: Path) -> int:
    """Dropped bodies whose memory the workers report freed (their last report, summed)."""
    last: dict[int, int] = {}
    for line in log.read_text().splitlines():
        if '"fedod.reclaim"' in line:
            entry = json.loads(line)
            last[entry["pid"]] = max(last.get(entry["pid"], 0), entry["dropped_bodies"])
    return sum(last.values())


def total_rss(pids: list[int]) -> int:
    return sum(rss_kib(pid) for pid in pids)


def test_stalled_bodies_are_dropped_and_their_memory_freed(coordinator_server, tmp_path,
                                                           monkeypatch, capsys):
    monkeypatch.setenv("FEDOD_BODY_TIMEOUT_S", "3")
    monkeypatch.setenv("FEDOD_LOG_LEVEL", "INFO")
    server = coordinator_server(f"sqlite:///{tmp_path / 'c.db'}", workers=WORKERS)
    workers = workers_of(server.proc.pid, WORKERS)
    for _ in range(20):  # warm every worker's code paths before the baseline
        assert httpx.get(server.url + "/healthz", timeout=60).status_code == 200
    baseline = total_rss(workers)
    head = (b"POST /v1/studies/s/contributions HTTP/1.1\r\nHost: x\r\n"
            b"Authorization: Bearer not-a-token\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(DECLARED).encode() + b"\r\n\r\n")
    socks = []
    for i in range(UPLOADS):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=300)
        s.sendall(head + b'{"pad": "' + bytes([97 + i % 26]) * (SENT - 9))
        socks.append(s)
    ports = {s.getsockname()[1] for s in socks}
    while unread_bytes(server.port, ports):  # until the workers have read all that was sent
        pass
    during = total_rss(workers)
    answers = answers_then_close(socks)
    for s in socks:
        s.close()
    assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers), {a[:40] for a in answers}
    deadline = time.monotonic() + 300  # a hang guard: the loop ends on the workers' reports
    while reclaimed(server.log) < UPLOADS:
        assert time.monotonic() < deadline, f"{reclaimed(server.log)} of {UPLOADS} reclaimed"
        time.sleep(0.1)
    after = total_rss(workers)
    with capsys.disabled():
        print(f"\nworkers' VmRSS: baseline {baseline / 1024:.1f} MiB, with {UPLOADS} stalled "
              f"bodies of {SENT // 1024} KiB {during / 1024:.1f} MiB, after the body timeout "
              f"{after / 1024:.1f} MiB (bound: baseline + {AFTER_BOUND_KIB // 1024} MiB)")
    assert during - baseline > UPLOADS * SENT // 1024 // 2  # the bodies really were held
    assert after - baseline <= AFTER_BOUND_KIB
