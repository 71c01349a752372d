"""Which uvicorn worker process holds a connection, and how much memory a worker uses (/proc)."""

from __future__ import annotations

import glob
import http.client
import os
import time
from pathlib import Path


def children(pid: int) -> list[int]:
    """PIDs whose parent is ``pid``."""
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.split("/")[2]))
    return found


def rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` in KiB (``VmRSS`` of ``/proc/<pid>/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise LookupError(f"no VmRSS for {pid}")


def _server_inode(server_port: int, client_port: int) -> str | None:
    """Inode of the server-side socket of the loopback connection from ``client_port``."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote = fields[1], fields[2]
            if (int(local.rsplit(":", 1)[1], 16) == server_port
                    and int(remote.rsplit(":", 1)[1], 16) == client_port):
                return fields[9]
    return None


def owner(pids: list[int], server_port: int, client_port: int) -> int | None:
    """The PID among ``pids`` whose file table holds the server end of this connection."""
    inode = _server_inode(server_port, client_port)
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for pid in pids:
        for fd in glob.glob(f"/proc/{pid}/fd/*"):
            try:
                if os.readlink(fd) == target:
                    return pid
            except OSError:
                continue
    return None


def workers_of(master: int, expected: int) -> list[int]:
    """The uvicorn worker processes of ``master`` (spawned children, not helper processes)."""
    pids = [pid for pid in children(master)
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(pids) == expected, (pids, expected)
    return pids


def connection_per_worker(
    port: int, workers: list[int], hang_guard_s: float = 300
) -> dict[int, http.client.HTTPConnection]:
    """One kept-alive connection answered by each worker (opened until every worker has one).

    A connection belongs to the worker that accepted it; which one does is the kernel's
    choice (and a worker still starting accepts none), so connections are opened and answered
    once until each worker holds one. The surplus is closed. ``hang_guard_s`` only bounds a
    hang; the loop ends on the observed owners.
    """
    held: dict[int, http.client.HTTPConnection] = {}
    deadline = time.monotonic() + hang_guard_s
    while time.monotonic() < deadline:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        response.read()
        assert response.status == 200
        pid = owner(workers, port, conn.sock.getsockname()[1])
        if pid is not None and pid not in held:
            held[pid] = conn
            if len(held) == len(workers):
                return held
        else:
            conn.close()
    raise AssertionError(f"connections reached only workers {sorted(held)} of {workers}")
