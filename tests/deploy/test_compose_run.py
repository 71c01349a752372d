"""docker-compose.yml's demo runs to the end: every service's exact command as a local process.

There is no container engine here, so the file is read as compose reads it (YAML anchors and
merge keys, ``${VAR:?...}`` interpolation) and each service runs as a process of the installed
console scripts: each named volume is a directory, a path under a mount point is rewritten to
that volume's directory (the deepest mount wins, as in a container), ``http://<service>:<port>``
points at the local process, the coordinator listens on a free loopback port, and PostgreSQL is
the local server at 127.0.0.1:5432 (a fresh schema) instead of the ``postgres`` service.
A service starts when its ``depends_on`` conditions hold (completed successfully, or healthy:
the coordinator answers ``/readyz``); the test ends when every one-shot service has exited.
Nothing is added to the commands: the secure round opens only through the signed config.
"""

from __future__ import annotations

import contextlib
import csv
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ENV = {"FEDOD_ADMIN_TOKEN": secrets.token_urlsafe(32), "POSTGRES_PASSWORD": "p" * 32}
HOSPITALS = ("general", "clinic-1", "specialist")


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?error}``."""
    def one(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3) or ""
        if env.get(name):
            return env[name]
        if op == ":?":
            raise AssertionError(f"compose refuses to start without {name}: {arg}")
        return arg if op == ":-" else ""
    return re.sub(r"\$\{([A-Z_]+)(?:(:[-?])([^}]*))?\}", one, text)


def load_services() -> dict[str, Any]:
    doc = yaml.safe_load(interpolate((ROOT / "docker-compose.yml").read_text(), ENV))
    return dict(doc["services"])


class Local:
    """One service as a local process: a directory stands for its filesystem, with each mount
    point a link to its volume's directory; absolute paths in its command and environment
    are rewritten into that directory, ``http://<service>:<port>`` to the local process."""

    def __init__(self, name: str, svc: dict[str, Any], root: Path, ports: dict[str, int],
                 database_url: str) -> None:
        self.name, self.svc, self.ports = name, svc, ports
        self.fs = root / "fs" / name
        self.mounts = sorted(
            ((spec.split(":")[1], root / "volumes" / spec.split(":")[0])
             for spec in svc.get("volumes", [])), key=lambda m: len(m[0]))
        env = {k: self.map(str(v)) for k, v in (svc.get("environment") or {}).items()}
        if "FEDOD_DATABASE_URL" in env:
            env["FEDOD_DATABASE_URL"] = database_url
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("FEDOD_")},
                    **env}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = root / f"{name}.log"

    def map(self, value: str) -> str:
        for service, port in self.ports.items():
            value = re.sub(rf"http://{re.escape(service)}:\d+", f"http://127.0.0.1:{port}", value)
        return str(self.fs) + value if value.startswith("/") else value

    def argv(self) -> list[str]:
        argv = [self.map(str(a)) for a in self.svc["command"]]
        if self.name in self.ports:  # the server: loopback, a free port
            argv[argv.index("--port") + 1] = str(self.ports[self.name])
            argv[argv.index("--host") + 1] = "127.0.0.1"
        return [str(BIN / argv[0]), *argv[1:]]

    def start(self) -> None:
        for target, volume in self.mounts:  # outer mounts first, as the engine does
            volume.mkdir(parents=True, exist_ok=True)
            link = Path(self.map(target))
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.is_symlink():
                if link.is_dir():
                    link.rmdir()  # an empty mount point inside an outer volume
                link.symlink_to(volume, target_is_directory=True)
        with self.log.open("ab") as fh:
            self.proc = subprocess.Popen(self.argv(), env=self.env, stdout=fh, stderr=fh,
                                         start_new_session=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_compose_demo_runs_to_the_end(tmp_path: Path, fresh_postgres_url: str) -> None:
    services = load_services()
    assert services["postgres"]["image"].startswith("postgres")
    ports = {"coordinator": _free_port()}
    local = {name: Local(name, svc, tmp_path, ports, fresh_postgres_url)
             for name, svc in services.items() if name != "postgres"}
    done: dict[str, int] = {}

    def ready(name: str) -> bool:
        for dep, cond in (services[name].get("depends_on") or {}).items():
            if dep == "postgres":
                continue  # the local server
            if cond["condition"] == "service_healthy" and not (
                    local[dep].proc is not None and _healthy(ports[dep])):
                return False
            if cond["condition"] == "service_completed_successfully" and done.get(dep) != 0:
                return False
        return True

    one_shot = [n for n in local if services[n].get("restart") != "unless-stopped"]
    try:
        while len(done) < len(one_shot):
            for name, svc in local.items():
                if svc.proc is None and ready(name):
                    svc.start()
            progressed = False
            for name in one_shot:
                proc = local[name].proc
                if proc is not None and name not in done and proc.poll() is not None:
                    done[name] = proc.returncode
                    assert proc.returncode == 0, (name, local[name].log.read_text()[-4000:])
                    progressed = True
            server = local["coordinator"].proc
            assert server is None or server.poll() is None, local["coordinator"].log.read_text()
            if not progressed:  # wait on a running process, not on a clock
                running = [s.proc for n, s in local.items()
                           if s.proc is not None and n in one_shot and n not in done]
                with contextlib.suppress(subprocess.TimeoutExpired):
                    (running[0] if running else server or local["init"].proc).wait(0.5)
        rounds = subprocess.run(
            [str(BIN / "fedod-coordinator"), "rounds", "list", "sim-study"],
            env=local["membership"].env, capture_output=True, text=True, timeout=120)
        assert rounds.returncode == 0, rounds.stderr
        assert "round 1 attempt 1: done" in rounds.stdout
    finally:
        for svc in local.values():
            if svc.proc is not None and svc.proc.poll() is None:
                os.killpg(svc.proc.pid, signal.SIGTERM)
                svc.proc.wait(timeout=30)
    for hospital in HOSPITALS:
        scores = tmp_path / "volumes" / f"{hospital}-data" / "scores.csv"
        with scores.open() as fh:
            rows = list(csv.DictReader(fh))
        assert rows and {"record_id", "outlier_score", "outlier"} <= set(rows[0])
        log = local[hospital].log.read_text()
        assert "released a new noisy histogram" in log, log[-2000:]
        assert "local epsilon spent 1\n" in log  # plain, as everywhere: not 1.000000000
