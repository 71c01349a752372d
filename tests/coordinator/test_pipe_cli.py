"""``fedod-... | head``: a reader that closes the pipe early ends the command quietly (exit 0,
no 'Broken pipe' error), for every console script (they share common.cli)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def _read_one_line_then_close(argv: list[str], env: dict[str, str] | None = None
                              ) -> tuple[int, str]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    assert first  # the command did write
    proc.stdout.close()  # as `head -1` does
    err = proc.stderr.read().decode()
    return proc.wait(timeout=120), err


def test_study_template_into_a_closed_pipe(tmp_path):
    data = tmp_path / "wide.csv"
    data.write_text(",".join(f"feature_{i}" for i in range(20_000)) + "\n")  # ~2 MB of spec
    code, err = _read_one_line_then_close(
        [str(BIN / "fedod-coordinator"), "study", "template", str(data), "-o", "-"])
    assert code == 0 and "Broken pipe" not in err and "Errno 32" not in err, err


@pytest.mark.parametrize("module", ["participant.cli.main", "simulation.main",
                                    "participant.consortium.cli"])
def test_every_entry_point_is_wrapped(module):
    """Each entry point runs its command through common.cli.quiet_broken_pipe."""
    source = Path(__import__(module, fromlist=["main"]).__file__).read_text()
    assert "quiet_broken_pipe(lambda: _main(argv))" in source


def test_quiet_broken_pipe_in_a_real_pipe():
    script = ("import sys\nfrom common.cli import quiet_broken_pipe\n"
              "def run():\n    for _ in range(200_000):\n        print('x' * 80)\n    return 5\n"
              "sys.exit(quiet_broken_pipe(run))\n")
    code, err = _read_one_line_then_close([sys.executable, "-c", script])
    assert code == 0 and err == "", err
