"""``fedod-participant cohorts``: the command body and its output (text or ``--json``); its
options are in :mod:`participant.cli.parser`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from participant.cli.output import options, out

if TYPE_CHECKING:
    from participant.agent import Agent


def _text(doc: dict[str, Any]) -> str:
    lines = [f"{len(doc['cohorts'])} private cohorts of {doc['study']} ({doc['method']}, "
             f"{doc['rounds']} rounds; this run sent rounds "
             f"{', '.join(map(str, doc['sent'])) or 'none'}); sizes are noisy:"]
    for c in doc["cohorts"]:
        centre = ", ".join(f"{k}={v:.4g}" for k, v in c["centre"].items())
        rule = f"  rule: {c['rule']}" if c["rule"] else ""
        lines.append(f"  cohort {c['cohort']}: size {c['size']:g}  centre {centre}{rule}")
    return "\n".join(lines)


def cmd_cohorts(agent: Agent, args: argparse.Namespace) -> None:
    from participant.cohorts.rounds import run_cohorts

    doc = run_cohorts(agent, args.study, args.data, options(args),
                      approve_schema=args.approve_schema, wait=args.wait,
                      send_slot=args.send_slot, stop_after=args.stop_after)
    if "stopped_after" in doc:
        out(args, doc, f"left cohort round {doc['round']} after storing its noisy vector")
        return
    out(args, doc, _text(doc))
