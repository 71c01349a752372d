"""``fedod-participant run``: the whole round for an unattended hospital, safe to rerun.

1. Enrol, unless the state directory already is (then the enrolment flags are ignored).
2. Release once per config version: a pending stored release is re-sent byte for byte; if a
   release under the current config version was already acknowledged, nothing new is drawn.
   A secure study (``aggregation.mode = "secure"``) releases through a round instead: wait for
   the admin to open one, take part until the sum is revealed (``participant.secagg.round``).
   A rerun resumes the round this participant already holds a noisy vector for while it is
   open, and joins no further round under the same config version.
3. Wait (polling, bounded) until ``--min-contributors`` participants contributed to the model.
4. Score the local records and write the score file.

Rerunning after a crash at any step therefore never pays twice.
"""

from __future__ import annotations

import argparse
import sys
import time
from decimal import Decimal

from common.budget import plain_decimal
from common.secagg.schemas import RoundStatus
from participant.agent import Agent, DataOptions
from participant.cli.output import count, options, out
from participant.consortium.cli import pin_consortium_key

POLL_SECONDS = 2.0


def cmd_run(agent: Agent, args: argparse.Namespace) -> None:
    doc = run_unattended(agent, args, options(args))
    what = "released a new noisy histogram" if doc["released_now"] else "already released"
    out(args, doc, f"{what} for {args.study}; model has "
                    f"{count(int(str(doc['contributors'])), 'contributor')}; scored {doc['rows']} "
                    f"records -> {doc['output']}; flagged {doc['flagged']}; local epsilon "
                    f"spent {plain_decimal(Decimal(str(doc['epsilon_spent'])))}")


def released_under(agent: Agent, study: str, version: int) -> bool:
    """True when the local ledger holds an acknowledged release for this config version."""
    with agent.ledger() as ledger:
        return any(
            e.config_version == version and e.status in ("acknowledged", "kept")
            for e in ledger.entries(study=study)
        )


def wait_for_contributors(agent: Agent, study: str, wanted: int, timeout: float) -> int:
    """Poll the model until it has ``wanted`` contributors; return the count seen."""
    from common.wire.schemas import ModelPublic

    deadline = time.monotonic() + timeout
    with agent.client() as client:
        while True:
            text, _ = client.get_model(study)
            seen = ModelPublic.model_validate_json(text or "{}").contributors
            if seen >= wanted:
                return seen
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the model of {study} has {seen} contributor(s) after {timeout:.0f} s; "
                    f"waited for {wanted} (lower --min-contributors or raise --wait)"
                )
            print(f"waiting: {seen}/{wanted} contributors in the model", file=sys.stderr)
            time.sleep(POLL_SECONDS)


def write_identity(agent: Agent, path: str) -> None:
    """Write ``{"participant", "identity_key"}`` (what ``identity --json`` prints) to ``path``,
    atomically: the file the data-protection officer certifies (``fedod-consortium certify``)."""
    import json
    import os

    from common.secagg.keys import raw_public
    from common.secagg.messages import b64e
    from participant.secagg.files import identity_key

    with agent.client() as client:
        name = client.me()["participant"]
    doc = {"participant": name, "identity_key": b64e(raw_public(identity_key(agent)))}
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        fh.write(json.dumps(doc) + "\n")
    os.replace(tmp, path)


def take_secure_round(agent: Agent, study: str, data: str, options: DataOptions,
                      released: bool, wait: float, send_slot: float,
                      identity_out: str | None = None) -> bool:
    """Join the open round, or resume the one already joined; False if nothing was left."""
    from participant.secagg.files import ensure_identity, rounds_taken
    from participant.secagg.round import current_round, run_secure_round

    ensure_identity(agent)  # before the admin opens a round, or this one is left out
    if identity_out:
        write_identity(agent, identity_out)
    if released:
        state = current_round(agent, study)
        if (state is None or state.round not in rounds_taken(agent, study)
                or state.status in (RoundStatus.DONE, RoundStatus.ABANDONED, RoundStatus.REJECTED)):
            return False
    run_secure_round(agent, study, data, options, wait=wait, send_slot=send_slot)
    return True


def run_unattended(agent: Agent, args: argparse.Namespace,
                   options: DataOptions) -> dict[str, object]:
    """Enrol if needed, release at most once per config version, wait, score."""
    if not agent.state.is_enrolled():
        fingerprint = args.fingerprint
        if args.fingerprint_file:
            with open(args.fingerprint_file) as fh:
                fingerprint = fh.read().strip()
        if not (args.coordinator and fingerprint and args.epsilon_cap and args.token_file):
            raise ValueError("not enrolled: give --coordinator, --fingerprint (or "
                             "--fingerprint-file), --token-file and --epsilon-cap")
        with open(args.token_file) as fh:
            token = fh.read().strip()
        agent.enrol(args.coordinator, token, fingerprint, epsilon_cap=args.epsilon_cap,
                    delta_cap=args.delta_cap, max_release_epsilon=args.max_release_epsilon,
                    max_release_delta=args.max_release_delta)
        if args.consortium_key:
            pin_consortium_key(agent, args.consortium_key)
    config, _ = agent.fetch_config(args.study)
    released = released_under(agent, args.study, config.version)
    release = {"send_slot": args.send_slot, "approve_schema": args.approve_schema,
               "drop_malformed": args.drop_malformed_rows}
    if config.aggregation_mode == "secure":
        released_now = take_secure_round(agent, args.study, args.data, options, released,
                                         args.wait, args.send_slot, args.identity_out)
        released = not released_now
    elif not released:
        agent.contribute(args.study, args.data, options, **release)
        # a re-sent pending release may have been for this version; release if still not
        if not released_under(agent, args.study, config.version):
            agent.contribute(args.study, args.data, options, **release)
    seen = wait_for_contributors(agent, args.study, args.min_contributors, args.wait)
    summary, model = agent.score(args.study, args.data, args.output, options,
                                 contamination=args.contamination, top_k=args.top_k)
    return {"released_now": not released, "contributors": seen, "rows": summary.rows,
            "flagged": summary.flagged, "output": summary.output,
            "model_version": model.version, "epsilon_spent": agent.spent().epsilon}
