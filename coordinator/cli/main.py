"""``fedod-coordinator``: run the server and administer studies, participants and keys.

Administrative commands work directly on the database named by ``FEDOD_DATABASE_URL`` (or the
SQLite file in ``FEDOD_DATA_DIR``) and the key at ``FEDOD_SIGNING_KEY_PATH``; run them on the
coordinator host. Exit codes: 0 success, 1 refused (unknown name, conflict, invalid input),
2 usage error, 3 bad configuration (environment, or no database or signing key where the
settings point: admin commands never create either), 4 database unreachable.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from coordinator.cli.support import (
    EXIT_CONFIG,
    EXIT_DATABASE,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    cmd_migrate,
    key_store,
    load_settings,
    open_session,
)

__all__ = ["EXIT_CONFIG", "EXIT_DATABASE", "EXIT_OK", "EXIT_REFUSED", "EXIT_USAGE", "build_parser",
           "main"]


def cmd_serve(args: argparse.Namespace, settings: Any) -> int:
    from coordinator.db.engine import check_connection_budget
    from coordinator.metrics import remove_stale_dirs
    from coordinator.server import raise_file_limit, run, uvicorn_options

    if not settings.admin_token:
        print("error: FEDOD_ADMIN_TOKEN must be set to serve", file=sys.stderr)
        return EXIT_CONFIG
    try:
        files = raise_file_limit(settings.limit_concurrency + 64 + 4 * settings.db_pool_size)
        budget = check_connection_budget(
            settings.resolved_database_url,
            args.workers,
            settings.connections_per_worker,
            settings.db_reserved_connections,
        )
    except ValueError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    cmd_migrate(args, settings)
    key_store(settings).ensure()
    for stale in remove_stale_dirs(settings.data_dir):
        print(f"removed stale metrics folder {stale}", file=sys.stderr)
    metrics_dir = settings.data_dir / f"prometheus-{os.getpid()}"
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    print(budget, file=sys.stderr)
    print(
        f"serving on http://{args.host}:{args.port} with {args.workers} worker(s); at most "
        f"{settings.limit_concurrency} connections per worker (open-files limit {files}); "
        f"proxy headers trusted from {settings.forwarded_allow_ips or 'nobody'}",
        file=sys.stderr,
    )
    try:
        run("coordinator.main:create_app", **uvicorn_options(args, settings))
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
    return EXIT_OK



def cmd_participant_add(args: argparse.Namespace, settings: Any) -> int:
    from common.budget import PrivacyBudget
    from coordinator.services.participants import create_participant

    cap = PrivacyBudget(args.epsilon_cap, args.delta_cap)
    with open_session(settings) as session:
        participant, token = create_participant(session, args.name, cap)
    print(f"enrolled {participant.name} with cap {cap}", file=sys.stderr)
    print("credential (shown once, store it now):", file=sys.stderr)
    print(token)
    return EXIT_OK


def cmd_participant_list(args: argparse.Namespace, settings: Any) -> int:
    from coordinator.services.participants import list_participants

    with open_session(settings) as session:
        for p in list_participants(session):
            state = "active" if p.active else "revoked"
            print(f"{p.name}\t{state}\tspent {p.spent}\tcap {p.cap}")
    return EXIT_OK


def cmd_participant_revoke(args: argparse.Namespace, settings: Any) -> int:
    from coordinator.services.participants import revoke_participant

    with open_session(settings) as session:
        revoke_participant(session, args.name)
    print(f"revoked {args.name}", file=sys.stderr)
    return EXIT_OK


def cmd_participant_raise_cap(args: argparse.Namespace, settings: Any) -> int:
    from coordinator.services.participants import set_cap

    if args.epsilon_cap is None and args.delta_cap is None:
        print("error: give --epsilon-cap and/or --delta-cap", file=sys.stderr)
        return EXIT_USAGE
    with open_session(settings) as session:
        p = set_cap(session, args.name, epsilon=args.epsilon_cap, delta=args.delta_cap)
        print(f"{p.name}: cap {p.cap}, spent {p.spent}", file=sys.stderr)
    return EXIT_OK


def cmd_member_add(args: argparse.Namespace, settings: Any) -> int:
    from coordinator.services.studies import add_member

    with open_session(settings) as session:
        add_member(session, args.study, args.participant)
    print(f"{args.participant} is a member of {args.study}", file=sys.stderr)
    return EXIT_OK


def cmd_rotate_key(args: argparse.Namespace, settings: Any) -> int:
    from coordinator.services.studies import resign_all

    keys = key_store(settings, existing=True)
    session = open_session(settings)
    retired = keys.rotate()
    with session:
        done = resign_all(session, keys)
    print(f"new key {keys.key_id()}; retired key kept at {retired}", file=sys.stderr)
    for study_id, version in done:
        print(f"re-signed {study_id} as config version {version}", file=sys.stderr)
    return EXIT_OK


def cmd_key_show(args: argparse.Namespace, settings: Any) -> int:
    keys = key_store(settings, existing=True)
    print(keys.key_id())
    print(keys.public_pem(), end="")
    return EXIT_OK


def _decimal(text: str) -> Decimal:
    try:
        return Decimal(text)
    except ArithmeticError as exc:
        raise argparse.ArgumentTypeError(f"not a decimal number: {text!r}") from exc


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    parser = argparse.ArgumentParser(
        prog="fedod-coordinator",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func: Callable[..., int], help_: str, parent: Any = sub) -> Any:
        p = parent.add_parser(name, help=help_, description=help_)
        p.set_defaults(func=func)
        return p

    serve = add("serve", cmd_serve, "migrate the database, then run the HTTP server (uvicorn)")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    serve.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    add("migrate", cmd_migrate, "upgrade the database schema to the latest version")

    from coordinator.cli.studies import add_parser as add_study

    add_study(add, sub)

    part = sub.add_parser("participant", help="enrol, list, revoke, change caps").add_subparsers(
        dest="participant_command", required=True, metavar="ACTION"
    )
    padd = add(
        "add",
        cmd_participant_add,
        "enrol a participant; prints its credential once on stdout",
        part,
    )
    padd.add_argument("name")
    padd.add_argument("--epsilon-cap", type=_decimal, required=True, help="total epsilon cap")
    padd.add_argument("--delta-cap", type=_decimal, default=Decimal(0), help="delta cap (0)")
    add("list", cmd_participant_list, "list participants with spent and cap", part)
    revoke = add("revoke", cmd_participant_revoke, "revoke a credential (immediate)", part)
    revoke.add_argument("name")
    raise_cap = add(
        "raise-cap",
        cmd_participant_raise_cap,
        "change a participant's caps; a cap below what it already spent is refused (exit 1)",
        part,
    )
    raise_cap.add_argument("name")
    raise_cap.add_argument("--epsilon-cap", type=_decimal)
    raise_cap.add_argument("--delta-cap", type=_decimal)

    member = sub.add_parser("member", help="study membership").add_subparsers(
        dest="member_command", required=True, metavar="ACTION"
    )
    madd = add("add", cmd_member_add, "let a participant read and contribute to a study", member)
    madd.add_argument("study")
    madd.add_argument("participant")

    add(
        "rotate-key",
        cmd_rotate_key,
        "replace the signing key (the old one is kept as "
        "*.retired-<time>) and re-sign every study's config as version + 1",
    )
    key = sub.add_parser("key", help="the signing key").add_subparsers(
        dest="key_command", required=True, metavar="ACTION"
    )
    add("show", cmd_key_show, "print the key fingerprint participants pin, then the PEM", key)
    from coordinator.cli.bootstrap import add_parser as add_bootstrap

    add_bootstrap(add)
    from coordinator.cli.cohorts import add_parser as add_cohorts

    add_cohorts(add)
    from coordinator.cli.rounds import add_parser as add_rounds

    add_rounds(add)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (0 when a reader such as ``head`` closed stdout)."""
    from common.cli import quiet_broken_pipe

    return quiet_broken_pipe(lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    from pydantic import ValidationError
    from sqlalchemy.exc import OperationalError

    from common.errors import FedodError
    from coordinator.cli.deployment import DeploymentMissing
    from coordinator.config import describe_settings_error

    args = build_parser().parse_args(argv)
    try:
        settings = load_settings()
    except ValidationError as exc:
        print(f"configuration error: {describe_settings_error(exc)}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        return int(args.func(args, settings))
    except BrokenPipeError:
        raise  # the reader closed stdout: quiet_broken_pipe ends the command
    except DeploymentMissing as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return EXIT_CONFIG
    except (FedodError, ValidationError, ValueError, OSError) as exc:
        message = exc.message if isinstance(exc, FedodError) else str(exc)
        print(f"error: {message}", file=sys.stderr)
        return EXIT_REFUSED
    except OperationalError as exc:
        print(f"database unreachable: {exc.orig}", file=sys.stderr)
        return EXIT_DATABASE


if __name__ == "__main__":
    sys.exit(main())
