"""``fedod-coordinator rounds ACTION STUDY``: the secure-aggregation rounds of a study.

``list`` every attempt, ``show`` the current one (or round N), ``open`` the next round with
the certified members, ``advance`` the open round past the members that have not acted
(declared lost), ``abort`` it (abandoned, no sum revealed), ``membership STUDY FILE`` upload
the consortium-signed membership certificate a round needs. A study whose signed config says
``"open_rounds": "when_ready"`` opens round 1 by itself once every certified member is ready.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from common.secagg.schemas import RoundStatus
from coordinator.cli.support import EXIT_OK, EXIT_USAGE, key_store, open_session, print_json

ACTIONS = ("list", "show", "open", "advance", "abort", "membership")


def describe(rnd: Any) -> str:
    """One line per attempt: what an administrator needs to decide the next step."""
    text = (f"round {rnd.round} attempt {rnd.attempt}: {rnd.status}; expected "
            f"{len(rnd.expected)} ({', '.join(rnd.expected)}); roster {rnd.cohort}, masked "
            f"{rnd.masked}, unmasked {rnd.survivors}")
    if rnd.status == RoundStatus.BEACON:
        text += ("; waits for the consortium's beacon signature of the roster (the DPO runs "
                 f"'fedod-consortium beacon --study {rnd.study_id} ...')")
    return text + (f"; {rnd.detail}" if rnd.detail else "")


def _next_step(session: Any, study: Any) -> str:
    from coordinator.services.secagg import auto

    state = auto.readiness(session, study)
    if state is not None:
        return (f"no round yet: the config opens round 1 by itself when every certified member "
                f"has registered its identity key ({state[0]} of {state[1]} so far)")
    return f"no round yet: open one with 'fedod-coordinator rounds open {study.id}'"


def _run(args: argparse.Namespace, settings: Any) -> tuple[list[Any], str | None]:
    from coordinator.services.secagg import rounds as secagg
    from coordinator.services.secagg import store
    from coordinator.services.secagg.phases import secure_params
    from coordinator.services.secagg.views import round_public
    from coordinator.services.studies import get_study

    with open_session(settings) as session:
        study = get_study(session, args.study)
        secure_params(study)  # refuses a study with independent noise
        note = None
        if args.action == "membership":
            from common.secagg.membership import SignedMembership

            signed = SignedMembership.model_validate_json(Path(args.arg).read_text())
            body = store.save_membership(session, study.id, secure_params(study)[1],
                                                signed)
            note = (f"membership v{body.version} of {study.id} stored: "
                    f"{', '.join(sorted(body.members))}")
            rounds = []
        elif args.action == "open":
            rounds = [secagg.open_round(session, study)]
        elif args.action in ("advance", "abort"):
            number = int(args.arg) if args.arg else secagg.current(session, study.id).number
            rounds = [secagg.advance(session, key_store(settings, existing=True), study, number)
                      if args.action == "advance"
                      else secagg.abort_round(session, study, number)]
        else:
            rounds = secagg.list_rounds(session, study.id)
            if args.action == "show":
                wanted = int(args.arg) if args.arg else None
                rounds = [r for r in rounds if wanted in (None, r.number)][-1:]
            if not rounds:
                note = _next_step(session, study)
        return [round_public(session, r) for r in rounds], note


def cmd_rounds(args: argparse.Namespace, settings: Any) -> int:
    if args.arg is not None and args.action in ("list", "open"):
        print(f"error: '{args.action}' takes only the study", file=sys.stderr)
        return EXIT_USAGE
    if args.action == "membership" and args.arg is None:
        print("error: 'membership' takes the certificate file (fedod-consortium sign's output)",
              file=sys.stderr)
        return EXIT_USAGE
    if args.action not in ("membership",) and args.arg is not None and not args.arg.isdigit():
        print(f"error: the round number must be a positive integer, not {args.arg!r}",
              file=sys.stderr)
        return EXIT_USAGE
    rounds, note = _run(args, settings)
    if args.json:
        print_json([r.model_dump(mode="json") for r in rounds])
    else:
        for rnd in rounds:
            print(describe(rnd))
    if note:
        print(note, file=sys.stderr)
    return EXIT_OK


def add_parser(add: Any) -> None:
    """Register the subcommand (``add`` is ``build_parser``'s helper)."""
    p = add("rounds", cmd_rounds, "secure-aggregation rounds of a study: 'list' every attempt, "
            "'show [ROUND]' the current (or that) round, 'open' the next round with the "
            "certified members, 'advance [ROUND]' past the members that have not acted, "
            "'abort [ROUND]' end it without a sum, 'membership FILE' upload the "
            "consortium-signed membership certificate")
    p.add_argument("action", choices=ACTIONS)
    p.add_argument("study", help="study id")
    p.add_argument("arg", nargs="?", metavar="ROUND|FILE",
                   help="round number (show, advance, abort; default the current round) or "
                   "the certificate file (membership)")
    p.add_argument("--json", action="store_true", help="print the rounds as JSON")
