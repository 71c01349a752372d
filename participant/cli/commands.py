"""Subcommand bodies of ``fedod-participant``: ``cmd_<name>`` for each, here or in the module
named after its feature (``run``, ``cohorts``, ``online`` for ``stream``), and
:data:`COMMANDS`, the table :mod:`participant.cli.main` dispatches on. Their options are in
:mod:`participant.cli.parser`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import httpx

from common.budget import plain_decimal
from common.errors import FedodError
from participant.agent import Agent
from participant.cli.cohorts import cmd_cohorts
from participant.cli.online import cmd_stream
from participant.cli.output import count, options, out
from participant.cli.run import cmd_run
from participant.config import Settings
from participant.consortium.cli import pin_consortium_key
from participant.online.notes import spending_note

__all__ = ["COMMANDS", "pin_consortium_key"]


def _clipped(clipped: dict[str, int]) -> str:
    if not clipped:
        return "no values outside the public bounds"
    parts = ", ".join(f"{k}: {v}" for k, v in clipped.items())
    return f"clipped to the public bounds (local only, not sent): {parts}"


def cmd_enrol(agent: Agent, args: argparse.Namespace) -> None:
    token = args.token or Settings().participant_token
    if args.token_file:
        with open(args.token_file) as fh:
            token = fh.read().strip()
    if not token:
        raise ValueError("give the credential with --token-file, --token or "
                         "FEDOD_PARTICIPANT_TOKEN")
    e = agent.enrol(args.coordinator, token, args.fingerprint, epsilon_cap=args.epsilon_cap,
                    delta_cap=args.delta_cap, max_release_epsilon=args.max_release_epsilon,
                    max_release_delta=args.max_release_delta)
    from participant.secagg.files import ensure_identity

    if args.consortium_key:
        e = pin_consortium_key(agent, args.consortium_key)
    ensure_identity(agent)  # the long-term identity key for secure rounds
    out(args, {"state": str(agent.state.root), "coordinator": e.coordinator_url,
                "key_fingerprint": e.key_fingerprint, "epsilon_cap": e.epsilon_cap,
                "delta_cap": e.delta_cap, "max_release_epsilon": e.max_release_epsilon,
                "max_release_delta": e.max_release_delta},
         f"enrolled with {e.coordinator_url}; key {e.key_fingerprint} pinned; local cap "
         f"epsilon={e.epsilon_cap} delta={e.delta_cap}, at most epsilon="
         f"{e.max_release_epsilon} per release; state in {agent.state.root}")


def cmd_identity(agent: Agent, args: argparse.Namespace) -> None:
    from common.secagg.keys import raw_public
    from common.secagg.messages import b64e
    from participant.secagg.files import identity_key

    key = b64e(raw_public(identity_key(agent)))
    with agent.client() as client:
        name = client.me()["participant"]
    out(args, {"participant": name, "identity_key": key}, f"{name} {key}")


def cmd_approve(agent: Agent, args: argparse.Namespace) -> None:
    before = agent.state.load_approved(args.study) if agent.state.is_enrolled() else None
    doc = agent.approve(args.study)
    old = [] if before is None else before["columns"]
    added = [c for c in doc["columns"] if c not in old]
    removed = [c for c in old if c not in doc["columns"]]
    out(args, {**doc, "added": added, "removed": removed},
         f"approved the columns config v{doc['config_version']} of {args.study} releases: "
         f"{doc['columns']} (added {added}, removed {removed})")


def cmd_config(agent: Agent, args: argparse.Namespace) -> None:
    c, signed = agent.fetch_config(args.study)
    cost = c.release_cost()
    doc = {"study": c.study_id, "version": c.version, "expires_at": c.expires_at,
           "digest": signed.digest(), "features": [f.name for f in c.features],
           "epsilon_per_release": cost.epsilon, "delta_per_release": cost.delta,
           "grid": c.grid_layout}
    out(args, doc, f"study {c.study_id} config v{c.version} verified (expires "
                    f"{c.expires_at:%Y-%m-%d}); {len(c.features)} features; each release "
                    f"costs {cost}; grid: {c.grid_layout or 'none'}")


def cmd_check_data(agent: Agent, args: argparse.Namespace) -> None:
    from participant.release.precheck import empty_warning

    source = agent.check_data(args.study, args.data, options(args))
    r = source.report
    if warning := empty_warning(r, None):
        print(f"warning: {warning}", file=sys.stderr)
    out(args, {"file": r.path, "rows": r.rows, "clipped": r.clipped},
         f"{r.path}: {r.rows} records match the study schema; {_clipped(r.clipped)}")


def cmd_contribute(agent: Agent, args: argparse.Namespace) -> None:
    o = agent.contribute(args.study, args.data, options(args), send_slot=args.send_slot,
                         approve_schema=args.approve_schema,
                         drop_malformed=args.drop_malformed_rows)
    if o.send_slots > 1:
        print(f"warning: reading the data took longer than the send slot ({args.send_slot:g} "
              f"s), so the release went out after {o.send_slots} slots, which hints at the "
              "data size; raise --send-slot", file=sys.stderr)
    for s in o.sent:
        what = "re-sent stored release" if s.resent else "sent release"
        print(f"{what} {s.idempotency_key}: contribution {s.contribution.get('id')}, "
              f"model version {s.contribution.get('model_version')}", file=sys.stderr)
    if o.sent and o.sent[0].resent:
        print("a pending release was re-sent (no new noise drawn); run contribute again "
              "for a new release", file=sys.stderr)
    out(args, {"sent": [s.__dict__ for s in o.sent], "clipped": o.clipped,
                "dropped_over_rows_per_id": o.dropped, "send_slots": o.send_slots,
                "epsilon_spent": o.spent.epsilon, "delta_spent": o.spent.delta,
                "epsilon_cap": o.cap.epsilon},
         "\n".join([_clipped(o.clipped),
                    *([f"{o.dropped} rows over --rows-per-id left out (local only)"]
                      if args.rows_per_id else []),
                    f"local budget spent {o.spent} of cap {o.cap}"]))


def cmd_score(agent: Agent, args: argparse.Namespace) -> None:
    summary, model = agent.score(args.study, args.data, args.output, options(args),
                                 contamination=args.contamination, top_k=args.top_k)
    spent = agent.spent()
    out(args, {"rows": summary.rows, "flagged": summary.flagged, "output": summary.output,
                "contributors": model.contributors, "model_version": model.version,
                "epsilon_spent": spent.epsilon, "clipped": summary.clipped},
         f"scored {summary.rows} records -> {summary.output}; flagged {summary.flagged} "
         f"as outliers; model v{model.version} from {count(model.contributors, 'contributor')}; "
         f"local epsilon spent so far {spent.epsilon.normalize():f}")


def cmd_ledger(agent: Agent, args: argparse.Namespace) -> None:
    agent.state.load_enrolment()  # not enrolled: exit 2, and no state folder is created
    with agent.ledger() as ledger:
        entries = ledger.entries()
        spent = ledger.spent()
    rows: list[dict[str, Any]] = [
        {"key": e.idempotency_key, "study": e.study, "config_version": e.config_version,
             "epsilon": e.cost.epsilon, "delta": e.cost.delta, "status": e.status,
             "created_at": e.created_at, "contribution_id": e.contribution_id,
             "detail": e.detail} for e in entries
    ]
    lines = [f"{r['created_at']}  {r['study']:<16} v{r['config_version']:<4} "
             f"eps={r['epsilon'].normalize():f} delta={r['delta'].normalize():f} "
             f"{r['status']:<12} {r['key']}" for r in rows]
    lines.append(f"total spent {spent}")
    out(args, {"entries": rows, "epsilon_spent": spent.epsilon, "delta_spent": spent.delta},
         "\n".join(lines))


def cmd_status(agent: Agent, args: argparse.Namespace) -> None:
    """Print what is known locally and the coordinator's view; if the coordinator cannot be
    asked (unreachable, credential refused), say so and exit non-zero after printing."""
    e = agent.state.load_enrolment()
    with agent.ledger() as ledger:
        spent, pending, entries = ledger.spent(), ledger.entries(status="stored"), ledger.entries()
    doc: dict[str, Any] = {"state": str(agent.state.root), "coordinator": e.coordinator_url,
                           "key_fingerprint": e.key_fingerprint, "cap": e.cap,
                           "max_release_epsilon": Decimal(e.max_release_epsilon),
                           "max_release_delta": Decimal(e.max_release_delta),
                           "spent": spent, "remaining": e.cap.remaining(spent),
                           "pending": [p.idempotency_key for p in pending]}
    try:
        with agent.client() as client:
            there = client.budget()
        doc["coordinator_spent"], doc["coordinator_remaining"] = there.spent, there.remaining
        if (note := spending_note(entries, spent, there.spent)) is not None:
            doc["why_they_differ"] = note
    except (FedodError, httpx.HTTPError) as exc:
        doc["coordinator_error"] = str(exc)
        args.deferred_error = exc  # participant.cli.main exits with its code after the output
    out(args, doc, "\n".join(
        f"{k}: {', '.join(v) or 'none' if isinstance(v, list) else _json_text(v)}"
        for k, v in doc.items()))


def _json_text(value: Any) -> str:
    return plain_decimal(value) if isinstance(value, Decimal) else str(value)


def cmd_round(agent: Agent, args: argparse.Namespace) -> None:
    from participant.secagg.round import run_secure_round

    doc = run_secure_round(agent, args.study, args.data, options(args), wait=args.wait,
                           stop_after=args.stop_after, send_slot=args.send_slot)
    if "stopped_after" in doc:
        out(args, doc, f"left round {doc['round']} after sending {doc['stopped_after']}")
        return
    out(args, doc, f"round {doc['round']} of {args.study} done (attempt {doc['attempt']}): "
                    f"sum of {doc['cohort']} participants revealed, {doc['survivors']} "
                    "answered the unmask")


COMMANDS: dict[str, Callable[[Agent, argparse.Namespace], None]] = {
    "enrol": cmd_enrol, "identity": cmd_identity, "approve": cmd_approve, "config": cmd_config,
    "check-data": cmd_check_data, "contribute": cmd_contribute, "score": cmd_score,
    "run": cmd_run, "round": cmd_round, "stream": cmd_stream, "cohorts": cmd_cohorts,
    "ledger": cmd_ledger, "status": cmd_status,
}
