"""``fedod-coordinator cohorts ACTION STUDY``: start, show and close a study's cohort rounds."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def cmd_cohorts(args: argparse.Namespace, settings: Any) -> int:
    from coordinator.cli.support import EXIT_OK, EXIT_USAGE, open_session, print_json
    from coordinator.services import cohorts
    from coordinator.services.cohorts_views import cohorts_public
    from coordinator.services.studies import get_study

    if (args.action == "close") != (args.round is not None):
        print("error: 'close' takes the round number (and only 'close' does)", file=sys.stderr)
        return EXIT_USAGE
    with open_session(settings) as session:
        study = get_study(session, args.study)
        if args.action == "start":
            cohorts.start(session, study)
        elif args.action == "close":
            rnd = cohorts.close(session, study, args.round)
            print(f"round {rnd.number} of {args.study} closed: {rnd.detail}", file=sys.stderr)
        print_json(cohorts_public(session, study))
    return EXIT_OK


def add_parser(add: Any) -> None:
    """Register the subcommand (``add`` is ``build_parser``'s helper)."""
    p = add("cohorts", cmd_cohorts, "private cohort rounds of a study: 'start' opens round 1 "
            "for its active members, 'show' prints the rounds and the released cohorts, "
            "'close STUDY ROUND' closes an open round with the releases received (the missing "
            "members are left out of later rounds)")
    p.add_argument("action", choices=("start", "show", "close"))
    p.add_argument("study", help="study id")
    p.add_argument("round", nargs="?", type=int, help="round number (close only)")
