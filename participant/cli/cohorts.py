"""``fedod-participant cohorts``: its options and its output (text or ``--json``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from participant.cli.output import options, out


def add_cohorts_parser(add: Callable[[str, str], argparse.ArgumentParser],
                       data_args: Callable[[argparse.ArgumentParser], None],
                       send_slot: float) -> None:
    p = add("cohorts", "take part in the study's private cohort rounds (one noisy vector per "
                       "round, drawn once, charged on both ledgers before any noise is "
                       "drawn), then print the released cohorts: size, centre, rule path")
    data_args(p)
    p.add_argument("--approve-schema", action="store_true",
                   help="approve the columns the current config releases, if they changed")
    p.add_argument("--send-slot", type=float, default=send_slot, metavar="S",
                   help="send each round's vector S seconds after reading the round's state, "
                        "however long reading the data takes (env FEDOD_SEND_SLOT; default: "
                        f"{send_slot:g})")
    p.add_argument("--wait", type=float, default=600.0, metavar="S",
                   help="give up after S seconds without a round to send or a released "
                        "model (600); rerunning resumes")
    p.add_argument("--stop-after", choices=("drawn",), default=None,
                   help="drill: leave right after a round's noisy vector was stored, before "
                        "sending it (the next run re-sends the same bytes)")


def _text(doc: dict[str, Any]) -> str:
    lines = [f"{len(doc['cohorts'])} private cohorts of {doc['study']} ({doc['method']}, "
             f"{doc['rounds']} rounds; this run sent rounds "
             f"{', '.join(map(str, doc['sent'])) or 'none'}); sizes are noisy:"]
    for c in doc["cohorts"]:
        centre = ", ".join(f"{k}={v:.4g}" for k, v in c["centre"].items())
        rule = f"  rule: {c['rule']}" if c["rule"] else ""
        lines.append(f"  cohort {c['cohort']}: size {c['size']:g}  centre {centre}{rule}")
    return "\n".join(lines)


def cmd_cohorts(agent: Any, args: argparse.Namespace) -> None:
    from participant.cohorts.rounds import run_cohorts

    doc = run_cohorts(agent, args.study, args.data, options(args),
                      approve_schema=args.approve_schema, wait=args.wait,
                      send_slot=args.send_slot, stop_after=args.stop_after)
    if "stopped_after" in doc:
        out(args, doc, f"left cohort round {doc['round']} after storing its noisy vector")
        return
    out(args, doc, _text(doc))
