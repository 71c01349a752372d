# --- coordinator fixtures (PostgreSQL test schema, study and release builders) ---------------
import os as _os
import secrets as _secrets
from pathlib import Path as _Path

import pytest as _pytest
from coordinator_kit import CoordinatorKit
from coordinator_kit import pg_base_url as _pg_base_url
from coordinator_kit import schema_url as _schema_url
from hypothesis import HealthCheck as _HealthCheck
from hypothesis import settings as _hypothesis_settings

# No test depends on wall-clock time: hypothesis's per-example deadline and its "too slow"
# health check both measure elapsed time, which a loaded machine stretches arbitrarily.
_hypothesis_settings.register_profile(
    "fedod", deadline=None, suppress_health_check=[_HealthCheck.too_slow]
)
_hypothesis_settings.load_profile("fedod")

# The everyday loop, ``pytest -m "not slow"`` (tests/README.md), leaves out every test that runs
# real server, participant or Dask worker processes or a browser: all of tests/integration and
# tests/browser, and any test elsewhere that uses one of these fixtures (``scheduler``: a Dask
# LocalCluster; ``adversary``: two participant processes). It also leaves out the PostgreSQL
# runs (mark ``postgres``; the API tests still run on SQLite) and a few long tests of modules
# listed here by node id. Plain ``pytest`` still runs them all.
SLOW_FOLDERS = ("integration", "browser")
SLOW_FIXTURES = {"participant_coordinator", "own_participant_coordinator", "recording_proxy",
                 "coordinator_server", "browser", "scheduler", "adversary"}
def _is_slow(item) -> bool:
    folder = item.path.relative_to(_Path(__file__).parent).parts[0]
    return (folder in SLOW_FOLDERS
            or item.get_closest_marker("postgres") is not None
            or bool(SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))))


@_pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        if _is_slow(item):
            item.add_marker(_pytest.mark.slow)


@_pytest.fixture(scope="session")
def postgres_url():
    """A URL into a fresh PostgreSQL schema of the test database, dropped afterwards.

    Skips when the server is unreachable, except under ``CI=true`` where that fails.
    """
    import sqlalchemy as sa

    base = _pg_base_url()
    engine = sa.create_engine(base)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.OperationalError as exc:
        engine.dispose()
        if _os.environ.get("CI", "").lower() == "true":
            _pytest.fail(f"PostgreSQL at {base} is required under CI: {exc.orig}")
        _pytest.skip(f"PostgreSQL not reachable at {base}")
    engine.dispose()
    yield from _schema_url("fedod_t")


@_pytest.fixture(scope="session")
def coord_kit():
    """Study and release builders for coordinator tests (see ``CoordinatorKit``)."""
    return CoordinatorKit


# --- participant fixtures (a real `fedod-coordinator serve` process on loopback) ------------


class ParticipantCoordinator:
    """A running coordinator plus admin helpers, for the participant integration tests."""

    def __init__(self, url: str, admin_token: str, data_dir: _Path, proc, log: _Path) -> None:
        self.url, self.admin_token, self.data_dir, self.proc, self.log = (
            url, admin_token, data_dir, proc, log
        )

    def admin(self, method: str, path: str, **kw):
        import httpx

        headers = {"Authorization": f"Bearer {self.admin_token}"}
        # A hang guard only: with fifty participant processes on two shared cores the
        # coordinator's answer may take minutes; a slow answer is not a failure.
        response = httpx.request(method, self.url + path, headers=headers, timeout=600, **kw)
        response.raise_for_status()
        return response.json() if response.content else None

    def new_participant(self, name: str, epsilon_cap: str = "100", delta_cap: str = "0") -> str:
        doc = self.admin("POST", "/v1/participants",
                         json={"name": name, "epsilon_cap": epsilon_cap, "delta_cap": delta_cap})
        return doc["token"]

    def new_study(self, study_id: str, features, members=(), **spec) -> dict:
        body = {"study_id": study_id, "features": features, **spec}
        study = self.admin("POST", "/v1/studies", json=body)
        for member in members:
            self.admin("POST", f"/v1/studies/{study_id}/members", json={"participant": member})
        return study

    def fingerprint(self) -> str:
        import httpx

        return httpx.get(self.url + "/v1/key", timeout=600).json()["key_id"]  # a hang guard

    def signing_key(self):
        from common.study.signing import load_private_key

        return load_private_key(self.data_dir / "signing_key.pem")

    def budget(self, name: str) -> dict:
        return next(b for b in self.admin("GET", "/v1/admin/budget") if b["participant"] == name)


def serve_participant_coordinator(data_dir: _Path):
    """`fedod-coordinator serve` (one worker) on a SQLite database in ``data_dir``: the
    ``(server, ParticipantCoordinator)``; the caller stops the server."""
    token = _secrets.token_urlsafe(32)
    env = {**_os.environ, "FEDOD_DATA_DIR": str(data_dir), "FEDOD_ADMIN_TOKEN": token,
           "FEDOD_ENV": "development", "FEDOD_LOG_JSON": "false"}
    env.pop("FEDOD_DATABASE_URL", None)
    env.pop("FEDOD_SIGNING_KEY_PATH", None)
    server = CoordinatorServer(env, 1, data_dir).start()
    return server, ParticipantCoordinator(server.url, token, data_dir, server.proc, server.log)


@_pytest.fixture(scope="session")
def participant_coordinator(tmp_path_factory):
    """Start `fedod-coordinator serve` with a temporary SQLite database; stop it after."""
    server, coord = serve_participant_coordinator(tmp_path_factory.mktemp("coordinator"))
    yield coord
    server.stop()


@_pytest.fixture
def own_participant_coordinator(tmp_path_factory):
    """A coordinator of the test's own (as ``participant_coordinator``), for a test that loads
    it with a whole cohort: what it leaves queued cannot slow the tests after it."""
    server, coord = serve_participant_coordinator(tmp_path_factory.mktemp("own-coordinator"))
    yield coord
    server.stop()


class RecordingProxy:
    """HTTP/1.1 loopback proxy that records every request a participant sends.

    ``drop(method, path)`` returning True makes the proxy forward the request upstream, wait
    for the answer, then close the client connection without relaying it (a network drop
    after the coordinator has acted); ``hold`` keeps the connection open instead, until the
    test kills the client. ``dropped`` is set each time that happens.
    """

    def __init__(self, upstream: str) -> None:
        import http.server
        import socketserver
        import threading

        import httpx

        self.upstream = httpx.Client(base_url=upstream, timeout=60)
        self.requests: list[tuple[str, str, dict, bytes]] = []
        self.drop = lambda method, path: False
        self.hold = False
        self.dropped = threading.Event()
        self.release = threading.Event()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "content-length", "connection")}
                proxy.requests.append((self.command, self.path, headers, body))
                answer = proxy.upstream.request(self.command, self.path, headers=headers,
                                                content=body)
                if proxy.drop(self.command, self.path):
                    proxy.dropped.set()
                    if proxy.hold:
                        proxy.release.wait(60)
                    self.close_connection = True
                    return
                self.send_response(answer.status_code)
                for key, value in answer.headers.items():
                    if key.lower() not in ("content-length", "content-encoding", "connection",
                                           "transfer-encoding", "date", "server"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _forward

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def bodies(self, path_part: str = "") -> list[bytes]:
        return [body for _, path, _, body in self.requests if path_part in path]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.upstream.close()


@_pytest.fixture
def recording_proxy(participant_coordinator):
    proxy = RecordingProxy(participant_coordinator.url)
    yield proxy
    proxy.close()


class CoordinatorServer:
    """``fedod-coordinator serve`` as a real process group (uvicorn workers) on loopback."""

    def __init__(self, env, workers, tmp_path):
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.env, self.workers, self.log = env, workers, tmp_path / "server.log"
        self.proc = None

    def start(self, timeout=300.0):
        """Start the server; ``timeout`` only bounds a hang (readiness is what ends the wait)."""
        import subprocess
        import sys
        import time

        import httpx

        cmd = [sys.executable, "-m", "coordinator.cli.main", "serve", "--port", str(self.port),
               "--workers", str(self.workers)]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, env=self.env, start_new_session=True,
                                         stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"coordinator exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"coordinator not ready: {self.log.read_text()[-2000:]}")

    def kill(self):
        """SIGKILL the whole process group (master and workers) at once."""
        import signal

        _os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        import signal
        import subprocess

        if self.proc is not None and self.proc.poll() is None:
            _os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


@_pytest.fixture
def coordinator_server(tmp_path):
    """Factory: ``start(database_url, workers=4)`` a real coordinator; stopped afterwards."""
    servers = []
    admin_token = _secrets.token_urlsafe(32)

    def start(database_url, workers=4):
        env = {**_os.environ, "FEDOD_DATABASE_URL": database_url,
               "FEDOD_ADMIN_TOKEN": admin_token, "FEDOD_DATA_DIR": str(tmp_path / "data"),
               "FEDOD_LOG_LEVEL": _os.environ.get("FEDOD_LOG_LEVEL", "WARNING")}
        server = CoordinatorServer(env, workers, tmp_path)
        server.admin_token = admin_token
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


@_pytest.fixture
def fresh_postgres_url(postgres_url):
    """A URL into an empty schema of its own (for a server that runs its own migrations)."""
    yield from _schema_url("fedod_i")


# --- browser fixtures (Debian's chromium + chromium-driver) -------------------------------
import shutil as _shutil  # noqa: E402

CHROMIUM = _shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = _shutil.which("chromedriver") or "/usr/bin/chromedriver"
ARTIFACTS = _Path(__file__).resolve().parents[1] / "artifacts"


@_pytest.fixture
def artifacts() -> _Path:
    """Where screenshots go (``artifacts/`` at the repository root)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@_pytest.fixture
def browser():
    """A headless Chromium WebDriver; required under CI=true."""
    if not (_os.path.exists(CHROMIUM) and _os.path.exists(CHROMEDRIVER)):
        if _os.environ.get("CI", "").lower() == "true":
            _pytest.fail("chromium and chromedriver are required under CI")
        _pytest.skip("chromium/chromedriver not installed")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--window-size=1280,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()
