"""Argument parser and subcommand bodies of ``fedod-participant`` (see ``participant.cli``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import httpx

from common.budget import PrivacyBudget, plain_decimal
from common.errors import FedodError
from participant.agent import Agent, DataOptions
from participant.cohorts_cli import add_cohorts_parser, cmd_cohorts
from participant.config import Settings
from participant.state import DEFAULT_MAX_RELEASE_EPSILON

SETTINGS = Settings()
DEFAULT_STATE = SETTINGS.state_dir


def count(n: int, noun: str) -> str:
    """``1 contributor``, ``2 contributors``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _json_value(value: Any) -> Any:
    """JSON for values json does not know: decimals as plain decimal strings ("0", "1.5",
    never "0E-18" or "1.000000000"), budgets as their two numbers, the rest as text."""
    if isinstance(value, Decimal):
        return plain_decimal(value)
    if isinstance(value, PrivacyBudget):
        return {"epsilon": _json_value(value.epsilon), "delta": _json_value(value.delta)}
    return str(value)


def _out(args: argparse.Namespace, doc: dict[str, Any], text: str) -> None:
    print(json.dumps(doc, default=_json_value) if args.json else text)


def _data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", help="study id")
    p.add_argument("data", help="local records: a .csv or .parquet file, or a directory or "
                                "glob of them (a dataset; each file is one partition)")
    p.add_argument("--id-column", metavar="NAME",
                   help="record-key column (kept for the score output, never sent)")
    p.add_argument("--ignore-column", metavar="NAME", action="append", default=[],
                   help="column to skip, e.g. an evaluation label (repeatable)")
    p.add_argument("--out-of-bounds", choices=("clip", "error"), default="clip",
                   help="values outside the study's public bounds: clip them to the bounds "
                        "and report how many (locally only), or refuse the file (check-data "
                        "and score only: a release always clips, since a refusal would tell "
                        "the coordinator whether a value lies beyond bounds it chose) "
                        "(default: clip)")
    p.add_argument("--chunk-rows", type=int, default=65_536, metavar="N",
                   help="records per chunk; bounds memory use (default: 65536)")
    p.add_argument("--engine", choices=("inprocess", "dask"), default="inprocess",
                   help="inprocess: read the data here, chunk by chunk (default); dask: one "
                        "partition per file of a dataset directory or glob, on a Dask cluster "
                        "(see docs/DASK.md)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="Dask scheduler address, e.g. tls://10.0.0.5:8786 (default with "
                        "--engine dask: start a LocalCluster on this machine)")


def _release_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rows-per-id", type=int, metavar="N",
                   help="keep at most N rows per --id-column value (first in file order): "
                        "the unit of privacy becomes one person with up to N rows, and the "
                        "noise is scaled by N (default: no cap; the unit is one row)")
    p.add_argument("--send-slot", type=float, default=SETTINGS.send_slot, metavar="S",
                   help="send the release S seconds after fetching the config, however long "
                        "reading the data takes, so the timing does not reveal its size "
                        f"(env FEDOD_SEND_SLOT; default: {SETTINGS.send_slot:g})")
    p.add_argument("--approve-schema", action="store_true",
                   help="approve the columns the current config releases, if they changed "
                        "since the last approval (otherwise such a config is refused)")


def _options(args: argparse.Namespace) -> DataOptions:
    if args.scheduler and args.engine != "dask":
        raise ValueError("--scheduler needs --engine dask")
    return DataOptions(args.id_column, tuple(args.ignore_column), args.out_of_bounds,
                       args.chunk_rows, args.progress, getattr(args, "rows_per_id", None),
                       args.engine, args.scheduler)


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
                    delta_cap=args.delta_cap, max_release_epsilon=args.max_release_epsilon)
    from participant.round_files import ensure_identity

    ensure_identity(agent)  # the long-term identity key for secure rounds
    _out(args, {"state": str(agent.state.root), "coordinator": e.coordinator_url,
                "key_fingerprint": e.key_fingerprint, "epsilon_cap": e.epsilon_cap,
                "delta_cap": e.delta_cap, "max_release_epsilon": e.max_release_epsilon},
         f"enrolled with {e.coordinator_url}; key {e.key_fingerprint} pinned; local cap "
         f"epsilon={e.epsilon_cap} delta={e.delta_cap}, at most epsilon="
         f"{e.max_release_epsilon} per release; state in {agent.state.root}")


def cmd_approve(agent: Agent, args: argparse.Namespace) -> None:
    before = agent.state.load_approved(args.study) if agent.state.is_enrolled() else None
    doc = agent.approve(args.study)
    old = [] if before is None else before["columns"]
    added = [c for c in doc["columns"] if c not in old]
    removed = [c for c in old if c not in doc["columns"]]
    _out(args, {**doc, "added": added, "removed": removed},
         f"approved the columns config v{doc['config_version']} of {args.study} releases: "
         f"{doc['columns']} (added {added}, removed {removed})")


def cmd_config(agent: Agent, args: argparse.Namespace) -> None:
    c, signed = agent.fetch_config(args.study)
    cost = c.release_cost()
    doc = {"study": c.study_id, "version": c.version, "expires_at": c.expires_at,
           "digest": signed.digest(), "features": [f.name for f in c.features],
           "epsilon_per_release": cost.epsilon, "delta_per_release": cost.delta,
           "grid": c.grid_layout}
    _out(args, doc, f"study {c.study_id} config v{c.version} verified (expires "
                    f"{c.expires_at:%Y-%m-%d}); {len(c.features)} features; each release "
                    f"costs {cost}; grid: {c.grid_layout or 'none'}")


def cmd_check_data(agent: Agent, args: argparse.Namespace) -> None:
    source = agent.check_data(args.study, args.data, _options(args))
    r = source.report
    _out(args, {"file": r.path, "rows": r.rows, "clipped": r.clipped},
         f"{r.path}: {r.rows} records match the study schema; {_clipped(r.clipped)}")


def cmd_contribute(agent: Agent, args: argparse.Namespace) -> None:
    o = agent.contribute(args.study, args.data, _options(args), send_slot=args.send_slot,
                         approve_schema=args.approve_schema)
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
    _out(args, {"sent": [s.__dict__ for s in o.sent], "clipped": o.clipped,
                "dropped_over_rows_per_id": o.dropped, "send_slots": o.send_slots,
                "epsilon_spent": o.spent.epsilon, "delta_spent": o.spent.delta,
                "epsilon_cap": o.cap.epsilon},
         f"{_clipped(o.clipped)}\n{o.dropped} rows over --rows-per-id left out (local only)"
         f"\nlocal budget spent {o.spent} of cap {o.cap}")


def cmd_score(agent: Agent, args: argparse.Namespace) -> None:
    summary, model = agent.score(args.study, args.data, args.output, _options(args),
                                 contamination=args.contamination, top_k=args.top_k)
    spent = agent.spent()
    _out(args, {"rows": summary.rows, "flagged": summary.flagged, "output": summary.output,
                "contributors": model.contributors, "model_version": model.version,
                "epsilon_spent": spent.epsilon, "clipped": summary.clipped},
         f"scored {summary.rows} records -> {summary.output}; flagged {summary.flagged} "
         f"as outliers; model v{model.version} from {count(model.contributors, 'contributor')}; "
         f"local epsilon spent so far {spent.epsilon.normalize():f}")


def cmd_run(agent: Agent, args: argparse.Namespace) -> None:
    from participant.run import run_round

    doc = run_round(agent, args, _options(args))
    what = "released a new noisy histogram" if doc["released_now"] else "already released"
    _out(args, doc, f"{what} for {args.study}; model has "
                    f"{count(int(str(doc['contributors'])), 'contributor')}; scored {doc['rows']} "
                    f"records -> {doc['output']}; flagged {doc['flagged']}; local epsilon "
                    f"spent {doc['epsilon_spent']}")


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
    _out(args, {"entries": rows, "epsilon_spent": spent.epsilon, "delta_spent": spent.delta},
         "\n".join(lines))


def cmd_status(agent: Agent, args: argparse.Namespace) -> None:
    """Print what is known locally and the coordinator's view; if the coordinator cannot be
    asked (unreachable, credential refused), say so and exit non-zero after printing."""
    e = agent.state.load_enrolment()
    with agent.ledger() as ledger:
        spent, pending = ledger.spent(), ledger.entries(status="stored")
    doc: dict[str, Any] = {"state": str(agent.state.root), "coordinator": e.coordinator_url,
                           "key_fingerprint": e.key_fingerprint, "cap": e.cap,
                           "max_release_epsilon": Decimal(e.max_release_epsilon),
                           "spent": spent, "remaining": e.cap.remaining(spent),
                           "pending": [p.idempotency_key for p in pending]}
    try:
        with agent.client() as client:
            there = client.budget()
        doc["coordinator_spent"], doc["coordinator_remaining"] = there.spent, there.remaining
    except (FedodError, httpx.HTTPError) as exc:
        doc["coordinator_error"] = str(exc)
        args.deferred_error = exc  # participant.cli exits with its code after the output
    _out(args, doc, "\n".join(
        f"{k}: {', '.join(v) or 'none' if isinstance(v, list) else _json_text(v)}"
        for k, v in doc.items()))


def _json_text(value: Any) -> str:
    return plain_decimal(value) if isinstance(value, Decimal) else str(value)


def cmd_round(agent: Agent, args: argparse.Namespace) -> None:
    from participant.secagg_round import run_secure_round

    doc = run_secure_round(agent, args.study, args.data, _options(args), wait=args.wait,
                           stop_after=args.stop_after)
    if "stopped_after" in doc:
        _out(args, doc, f"left round {doc['round']} after sending {doc['stopped_after']}")
        return
    _out(args, doc, f"round {doc['round']} of {args.study} done (attempt {doc['attempt']}): "
                    f"sum of {doc['cohort']} participants revealed, {doc['survivors']} "
                    "answered the unmask")


COMMANDS: dict[str, Callable[[Agent, argparse.Namespace], None]] = {
    "enrol": cmd_enrol, "approve": cmd_approve, "config": cmd_config, "check-data": cmd_check_data,
    "contribute": cmd_contribute, "score": cmd_score, "run": cmd_run, "ledger": cmd_ledger,
    "status": cmd_status, "round": cmd_round, "cohorts": cmd_cohorts,
}


def _cmd_stream(agent: Agent, args: argparse.Namespace) -> None:
    from participant.stream_cmd import cmd_stream

    cmd_stream(agent, args)


COMMANDS["stream"] = _cmd_stream


def _global_options(defaults: bool) -> argparse.ArgumentParser:
    """Options accepted before or after the subcommand (subcommand copies do not reset them)."""
    def d(value: Any) -> Any:
        return value if defaults else argparse.SUPPRESS

    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--state", default=d(DEFAULT_STATE), metavar="DIR",
                   help=f"state directory (env FEDOD_STATE_DIR; default: {DEFAULT_STATE})")
    p.add_argument("--json", action="store_true", default=d(False),
                   help="machine-readable output on stdout")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=d(None),
                   help="progress bar on stderr (default: when stderr is a terminal)")
    p.add_argument("--max-tries", type=int, default=d(6), metavar="N",
                   help="attempts per request before giving up (default: 6)")
    p.add_argument("--timeout", type=float, default=d(30.0), metavar="S",
                   help="per-request timeout in seconds (default: 30)")
    return p


def _score_args(p: argparse.ArgumentParser) -> None:
    _data_args(p)
    p.add_argument("--output", "-o", required=True, metavar="FILE",
                   help="output .csv or .parquet: key, per-detector scores, outlier_score, "
                        "rank, outlier (--engine dask: a new directory *.parquet holding one "
                        "Parquet file per partition)")
    flag = p.add_mutually_exclusive_group()
    flag.add_argument("--contamination", type=float, metavar="FRACTION",
                      help="flag this fraction of records (default: 0.05)")
    flag.add_argument("--top-k", type=int, metavar="K", help="flag the K most outlying records")


def _ceiling_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-release-epsilon", metavar="EPS",
                   help="per-release epsilon ceiling: a config spending more in one release "
                        f"is refused before any data is read (default: "
                        f"{DEFAULT_MAX_RELEASE_EPSILON}, or the cap if smaller; set at "
                        "enrolment)")


def build_parser(doc: str) -> argparse.ArgumentParser:
    common = _global_options(defaults=False)
    summary, _, epilog = doc.partition("Exit codes:")
    parser = argparse.ArgumentParser(
        prog="fedod-participant", description=summary.strip().replace("``", ""),
        epilog="exit codes:" + epilog, formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_global_options(defaults=True)])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, help_: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_, description=help_, parents=[common])

    p = add("enrol", "fetch the coordinator key, check it against the pinned fingerprint, and "
                     "store URL, credential, fingerprint and local privacy cap (dir 0700, "
                     "files 0600)")
    p.add_argument("--coordinator", required=True, metavar="URL", help="coordinator base URL")
    p.add_argument("--fingerprint", required=True, metavar="sha256:HEX",
                   help="coordinator key fingerprint, obtained out of band")
    p.add_argument("--token-file", metavar="FILE", help="file holding the credential")
    p.add_argument("--token", help="credential (prefer --token-file or FEDOD_PARTICIPANT_TOKEN)")
    p.add_argument("--epsilon-cap", required=True, metavar="EPS",
                   help="local epsilon cap over all releases; no config can raise it")
    p.add_argument("--delta-cap", default="0", metavar="DELTA", help="local delta cap (0)")
    _ceiling_arg(p)
    p = add("approve", "fetch a study config and approve the columns it releases; needed "
                       "when a new config version releases other columns than approved "
                       "(the first release of a study approves its columns)")
    p.add_argument("study", help="study id")
    p = add("config", "fetch and verify a study config (signature, expiry, no downgrade, "
                      "hash digest) and remember its version")
    p.add_argument("study", help="study id")
    _data_args(add("check-data", "fetch the study config and check a data file against its "
                                 "schema; no data and no release is sent"))
    p = add("contribute", "release noisy histograms of a data file; if an earlier release is "
                          "stored but unacknowledged, re-send it byte for byte instead (no new "
                          "noise) and stop. Once the data is read the release is charged and "
                          "sent at the send slot; if the data cannot be used, noise-only "
                          "counts go out in its place (exit 3)")
    _data_args(p)
    _release_args(p)
    _score_args(add("score", "score local records against the global model and write scores"))
    p = add("run", "unattended round, safe to rerun: enrol if needed, release at most once "
                   "per config version (a secure study: join the open round, or resume the "
                   "one this participant is in, until its sum is revealed), wait for "
                   "--min-contributors, score")
    _score_args(p)
    _release_args(p)
    _ceiling_arg(p)
    p.add_argument("--coordinator", metavar="URL", help="coordinator URL (first run only)")
    p.add_argument("--fingerprint", metavar="sha256:HEX", help="pinned key (first run only)")
    p.add_argument("--fingerprint-file", metavar="FILE", help="file holding the fingerprint")
    p.add_argument("--token-file", metavar="FILE", help="credential file (first run only)")
    p.add_argument("--epsilon-cap", metavar="EPS", help="local epsilon cap (first run only)")
    p.add_argument("--delta-cap", default="0", metavar="DELTA", help="local delta cap (0)")
    p.add_argument("--min-contributors", type=int, default=1, metavar="N",
                   help="wait until N participants contributed to the model before scoring (1)")
    p.add_argument("--wait", type=float, default=600.0, metavar="S",
                   help="give up waiting for contributors (a secure study: for an open "
                        "round) after S seconds (600)")
    p = add("round", "take part in the open secure-aggregation round of a study: one noisy "
                     "vector (counts + noise share, drawn once, charged once), masked; the "
                     "coordinator learns only the cohort's sum")
    _data_args(p)
    p.add_argument("--wait", type=float, default=600.0, metavar="S",
                   help="give up if no round is open within S seconds (600)")
    p.add_argument("--stop-after", choices=("keys", "masked"), default=None,
                   help="drill: leave right after that message was accepted, as a "
                        "participant lost at that point would")
    from participant.stream_cmd import add_parser as add_stream

    add_stream(add)
    add_cohorts_parser(add)
    add("ledger", "list every local release and the total privacy spent")
    add("status", "show enrolment, local budget, pending releases, coordinator's view")
    return parser
