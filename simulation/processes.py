"""Process start-up for the simulation: a free loopback port, the coordinator process (ready
once ``/readyz`` answers), and one process per hospital (or per consortium step) run side by
side."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

PARTICIPANT = (sys.executable, "-m", "participant.cli.main", "--no-progress")
"""How a hospital's ``fedod-participant`` process is started (its options follow)."""
CONSORTIUM = (sys.executable, "-m", "participant.consortium.cli")
"""How the consortium's ``fedod-consortium`` is started (its subcommand follows)."""


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_coordinator(workdir: Path, database_url: str | None, port: int) -> tuple[Any, str, str]:
    """Start ``fedod-coordinator serve`` and wait until ``/readyz`` answers 200."""
    token = secrets.token_urlsafe(32)
    env = dict(os.environ, FEDOD_DATA_DIR=str(workdir / "coordinator"), FEDOD_ADMIN_TOKEN=token)
    if database_url:
        env["FEDOD_DATABASE_URL"] = database_url
    log = (workdir / "coordinator.log").open("wb")
    cmd = [sys.executable, "-m", "coordinator.cli.main", "serve", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"coordinator exited early; see {workdir / 'coordinator.log'}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return proc, url, token
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"coordinator did not become ready; see {workdir / 'coordinator.log'}")


def run_all(cmds: list[list[str]], logs: list[Path]) -> None:
    """Run one process per hospital concurrently; fail loudly if any fails."""
    procs = []
    for cmd, log in zip(cmds, logs, strict=True):
        with log.open("ab") as fh:
            procs.append(subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT))
    for proc, log, cmd in zip(procs, logs, cmds, strict=True):
        if proc.wait() != 0:
            tail = log.read_text(errors="replace")[-2000:]
            raise SystemExit(f"hospital process failed ({' '.join(cmd)}):\n{tail}")


def run_json(cmds: list[list[str]]) -> list[Any]:
    """Run the processes concurrently and return what each printed on stdout, parsed as JSON
    (in order); fail loudly if any fails."""
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for cmd in cmds]
    docs = []
    for proc, cmd in zip(procs, cmds, strict=True):
        out, err = proc.communicate()
        if proc.returncode != 0:
            tail = err.decode(errors="replace")[-2000:]
            raise SystemExit(f"process failed ({' '.join(cmd)}):\n{tail}")
        docs.append(json.loads(out))
    return docs
