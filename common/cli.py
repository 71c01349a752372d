"""Plumbing shared by every ``fedod-*`` command line (coordinator, participant, consortium,
simulation): an entry point whose reader went away (``fedod-... | head``) ends quietly.

When the process reading a command's standard output exits early (``head``, ``less`` closed),
the next write raises :class:`BrokenPipeError`. That is not an error of the command: the
reader had what it wanted. :func:`quiet_broken_pipe` runs an entry point, and on a broken pipe
points stdout at ``/dev/null`` (so the interpreter's final flush cannot raise again) and
returns 0 without a traceback or an ``error:`` line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

__all__ = ["quiet_broken_pipe"]


def quiet_broken_pipe(entry: Callable[[], int]) -> int:
    """``entry()``'s exit code, or 0 when its output pipe was closed by the reader."""
    try:
        code = entry()
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0
