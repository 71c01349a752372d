"""``fedod-participant cohorts``: the command body and its output (text or ``--json``); its
options are in :mod:`participant.cli.parser`.

Every cohort carries its marks (:mod:`common.cohorts.marks`): a size within the public count
noise, a centre that never moved from its public start, or one at a corner of the study's box
is printed as "not a finding", never as a plain result.
"""

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
        if c.get("note"):
            lines.append(f"    ({c['note']})")
    marked = sum(bool(c.get("marks")) for c in doc["cohorts"])
    if marked:
        lines.append(f"{marked} of {len(doc['cohorts'])} cohorts are marked 'not a finding': "
                     "the noise, not the records, set them (docs/COHORTS.md, Reading the "
                     "cohorts); more epsilon, more participants or a smaller k helps.")
    return "\n".join(lines)


def _with_marks(agent: Agent, doc: dict[str, Any]) -> dict[str, Any]:
    """The cohorts with their marks, computed from the public run and the signed config."""
    from common.cohorts.marks import marks_of_public
    from common.cohorts.study import protocol_of

    with agent.client() as client:
        config, _ = agent.fetch_config(doc["study"], client)
        public = client.get_cohorts(doc["study"])
    marks = marks_of_public(protocol_of(config), public)
    cohorts = [{**c, "marks": list(marks[c["cohort"]].flags),
                "note": marks[c["cohort"]].describe()} if marks else c for c in doc["cohorts"]]
    return {**doc, "cohorts": cohorts}


def cmd_cohorts(agent: Agent, args: argparse.Namespace) -> None:
    from participant.cohorts.rounds import run_cohorts

    doc = run_cohorts(agent, args.study, args.data, options(args),
                      approve_schema=args.approve_schema, wait=args.wait,
                      send_slot=args.send_slot, stop_after=args.stop_after)
    if "stopped_after" in doc:
        out(args, doc, f"left cohort round {doc['round']} after storing its noisy vector")
        return
    doc = _with_marks(agent, doc)
    out(args, doc, _text(doc))
