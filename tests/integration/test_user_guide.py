"""docs/USER_GUIDE.md, run as written: every ``$`` command in its console blocks, in order,
with real processes, in an empty directory; each command's exit code and the output lines the
guide shows. Only the install line is stood in for (no network here): ``.venv`` becomes a link
to the environment running the tests, installed from this checkout. The activation line then
runs as written, and it alone puts the ``fedod-*`` commands on the PATH."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "USER_GUIDE.md"
BIN = Path(sys.executable).parent


def steps(text: str) -> list[tuple[str, list[str], int]]:
    """``(command, expected output fragments, expected exit code)`` per ``$`` line."""
    out: list[tuple[str, list[str], int]] = []
    for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                out.append((line[2:], [], 0))
            elif (m := re.fullmatch(r"# exit (\d+)", line.strip())) and out:
                out[-1] = (out[-1][0], out[-1][1], int(m.group(1)))
            elif line.strip() and out:
                out[-1][1].append(line)
    return out


def test_the_guide_has_steps():
    found = steps(GUIDE.read_text())
    assert len(found) > 25
    assert any(code == 7 for _, _, code in found)  # the revocation step
    assert "source .venv/bin/activate" in [command for command, _, _ in found]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    for _ in range(600):  # bounded by attempts, each waiting on the server's own answer
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.2)
    raise AssertionError("server did not become ready")


def test_user_guide_runs_as_written(tmp_path):
    port = str(_free_port())
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FEDOD_") and k != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if Path(p).resolve() != BIN.resolve())
    exports: list[str] = []
    servers: list[subprocess.Popen[bytes]] = []
    found = steps(GUIDE.read_text())
    assert "pip install" in found[0][0] and found[1][0] == "source .venv/bin/activate"
    try:
        for command, expected, code in found:
            if "pip install" in command:
                (tmp_path / ".venv").symlink_to(BIN.parent, target_is_directory=True)
                continue  # the stand-in for the install line (module docstring)
            command = command.replace("8000", port)
            script = "\n".join([*exports, command.removesuffix("&").strip()])
            if command.startswith(("export ", "source ")):
                exports.append(command)
                continue
            if command.endswith("&"):
                log = tmp_path / "server.log"
                with log.open("ab") as fh:
                    servers.append(subprocess.Popen(["bash", "-c", script], cwd=tmp_path,
                                                    env=env, stdout=fh, stderr=fh,
                                                    start_new_session=True))
                _wait_ready(f"http://127.0.0.1:{port}", servers[-1], log)
                continue
            done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=300)
            output = done.stdout + done.stderr
            assert done.returncode == code, (command, done.returncode, output[-3000:])
            for fragment in expected:
                assert fragment.strip() in output, (command, fragment, output[-3000:])
    finally:
        for proc in servers:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
