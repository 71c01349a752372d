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
        doc = cohorts_public(session, study)
        print_json(doc) if args.json else print(summary(doc))
    return EXIT_OK


def summary(doc: Any) -> str:
    """A few lines: the run's status, each round's senders, the released cohorts' sizes with
    their marks (``--json`` prints the whole public state, centres included)."""
    lines = [f"cohorts of {doc.study_id} ({doc.method}, {doc.rounds} rounds): {doc.status}"
             + (f", round {doc.round} open" if doc.round else "")]
    for r in doc.history:
        waiting = sorted(set(r.expected) - set(r.sent))
        lines.append(f"  round {r.number}: {r.status}; sent {len(r.sent)} of "
                     f"{len(r.expected)}" + (f", waiting for {', '.join(waiting)}"
                                             if waiting and r.status == "open" else "")
                     + (f"; {r.detail}" if r.detail else ""))
    if doc.model is not None:
        marks = doc.marks or [[] for _ in doc.model.get("masses", [])]
        sizes = [f"{m:.0f}" + (f" ({', '.join(flags)}: no finding)" if flags else "")
                 for m, flags in zip(doc.model.get("masses", []), marks, strict=False)]
        lines.append(f"  {len(sizes)} cohorts released, noisy sizes: {', '.join(sizes)}")
        lines.append(f"  centres and rules: 'fedod-coordinator cohorts show {doc.study_id} "
                     "--json' or the dashboard")
    return "\n".join(lines)


def add_parser(add: Any) -> None:
    """Register the subcommand (``add`` is ``build_parser``'s helper)."""
    p = add("cohorts", cmd_cohorts, "private cohort rounds of a study: 'start' opens round 1 "
            "for its active members, 'show' prints the rounds and the released cohorts, "
            "'close STUDY ROUND' closes an open round with the releases received (the missing "
            "members are left out of later rounds)")
    p.add_argument("action", choices=("start", "show", "close"))
    p.add_argument("study", help="study id")
    p.add_argument("round", nargs="?", type=int, help="round number (close only)")
    p.add_argument("--json", action="store_true",
                   help="print the whole public state as JSON (centroids, model, rounds)")
