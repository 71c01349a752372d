"""``fedod-participant``: run a fedod participant next to local data.

Subcommands: enrol, approve, config, check-data, contribute, score, run, round, stream, cohorts,
ledger, status.

Exit codes:
    0  success
    1  unexpected internal error (a bug: please report it)
    2  usage error (bad arguments, state directory not enrolled)
    3  data invalid (schema, non-numeric, missing or refused out-of-bounds values); for
       contribute/run after the data was read: a noise-only release was sent and charged
    4  config or key refused (bad signature, wrong key, expired, downgrade, digest mismatch,
       released columns changed since the operator's approval: run `approve`; stream: the
       study's online section was re-signed differently)
    5  privacy budget refused (local cap, per-release ceiling, or the coordinator's ledger)
    6  coordinator unavailable after retries (a stored release is re-sent on the next run),
       or `run` gave up waiting for contributors
    7  coordinator refused the request (HTTP 4xx: credential, unknown study, conflict);
       round: the round was abandoned, or its revealed sum was rejected by the coordinator's
       check (reason printed; the release stays charged, run `round` again for the next)
    8  stream stopped: the next schedule window's charge would pass a cap (local or the
       coordinator's); nothing of that window was decided or noised, and the position is kept.
       A window costs epsilon and delta: raise both caps on both ledgers
       (`fedod-coordinator participant raise-cap NAME --epsilon-cap E --delta-cap D`; locally
       `fedod-participant enrol ... --epsilon-cap E --delta-cap D`), then stream again
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from common.errors import FedodError
from participant.agent import Agent
from participant.cli.commands import COMMANDS
from participant.cli.parser import build_parser
from participant.state import NotEnrolled

EXIT_OK, EXIT_BUG, EXIT_USAGE, EXIT_DATA, EXIT_CONFIG = 0, 1, 2, 3, 4
EXIT_BUDGET, EXIT_UNAVAILABLE, EXIT_REFUSED, EXIT_STREAM_CAP = 5, 6, 7, 8


# the library's errors, which carry no ``exit_code``: the first base class found here decides
LIBRARY_EXIT_CODES: dict[type[BaseException], int] = {
    TimeoutError: EXIT_UNAVAILABLE, ValueError: EXIT_USAGE, OSError: EXIT_USAGE}


def exit_code(exc: BaseException) -> int:
    """The documented exit code of an error: its ``exit_code`` (common.errors), else the
    nearest base class in :data:`LIBRARY_EXIT_CODES`, else 1 (a bug)."""
    code = getattr(exc, "exit_code", None)
    if isinstance(code, int):
        return code
    return next((LIBRARY_EXIT_CODES[c] for c in type(exc).__mro__ if c in LIBRARY_EXIT_CODES),
                EXIT_BUG)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (0 when a reader such as ``head`` closed stdout)."""
    from common.cli import quiet_broken_pipe

    return quiet_broken_pipe(lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser(__doc__ or "")
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if args.progress is None:
        args.progress = sys.stderr.isatty()
    agent = Agent(args.state, max_tries=args.max_tries, timeout=args.timeout)
    try:
        COMMANDS[args.command](agent, args)
    except KeyboardInterrupt:
        print("interrupted; a stored release will be re-sent on the next run", file=sys.stderr)
        return 130
    except BrokenPipeError:
        raise  # the reader closed stdout: quiet_broken_pipe ends the command
    except (FedodError, NotEnrolled, ValueError, OSError) as exc:
        code = exit_code(exc)
        if args.json:
            print(json.dumps({"error": type(exc).__name__, "detail": str(exc), "exit": code}))
        print(f"fedod-participant: error: {exc}", file=sys.stderr)
        return code
    if (deferred := getattr(args, "deferred_error", None)) is not None:
        # the command printed its output (which names the error) and could not finish its job
        print(f"fedod-participant: error: {deferred}", file=sys.stderr)
        return exit_code(deferred) if isinstance(deferred, FedodError) else EXIT_UNAVAILABLE
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] if len(sys.argv) > 1 else None))
