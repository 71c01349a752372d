"""ruff and mypy (strict on every package) are part of the test run, so CI runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "argv",
    [
        [str(BIN / "ruff"), "check", "--no-cache", "."],
        [str(BIN / "mypy")],
    ],
    ids=["ruff", "mypy"],
)
def test_static_checks_pass(argv: list[str]) -> None:
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-5000:] + out.stderr[-2000:]
