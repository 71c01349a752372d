"""The argument parser of ``fedod-participant``: every subcommand's options, in the order
``--help`` lists them (each subcommand's body is ``cmd_<name>``, found through
``participant.cli.commands.COMMANDS``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from participant.config import Settings
from participant.state import DEFAULT_MAX_RELEASE_DELTA, DEFAULT_MAX_RELEASE_EPSILON

SETTINGS = Settings()
DEFAULT_STATE = SETTINGS.state_dir

STREAM_HELP = (
    "score records as they arrive (JSON lines or CSV on stdin, or files appearing in "
    "--watch DIR) with the global models and the online classifier; ask the reviewer "
    "for labels when the private query rule fires; release one noisy gradient per "
    "window of the study's public schedule, when the window ends (docs/ONLINE.md). "
    "Restart-safe: records already consumed are skipped, windows that ended meanwhile "
    "are closed, and nothing is charged or noised twice. Stops with exit 8 when the next "
    "window's charge would pass a cap, before any decision or noise of it. With the "
    "config's centre_window, that window queries nothing and releases the noisy sum of "
    "its records, and later records are centred on the served centre")


def data_args(p: argparse.ArgumentParser) -> None:
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


def release_args(p: argparse.ArgumentParser) -> None:
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
    p.add_argument("--drop-malformed-rows", action="store_true",
                   help="release a file with malformed rows, dropping each one as an absent "
                        "record (default: the whole-file check before any request refuses "
                        "it, naming every bad column and its first bad rows; nothing is "
                        "sent or charged)")


def global_options(defaults: bool) -> argparse.ArgumentParser:
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


def score_args(p: argparse.ArgumentParser) -> None:
    data_args(p)
    p.add_argument("--output", "-o", required=True, metavar="FILE",
                   help="output .csv or .parquet: key, per-detector scores, outlier_score, "
                        "rank, outlier (--engine dask: a new directory *.parquet holding one "
                        "Parquet file per partition)")
    flag = p.add_mutually_exclusive_group()
    flag.add_argument("--contamination", type=float, metavar="FRACTION",
                      help="flag this fraction of records (default: 0.05)")
    flag.add_argument("--top-k", type=int, metavar="K", help="flag the K most outlying records")


def ceiling_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-release-epsilon", metavar="EPS",
                   help="per-release epsilon ceiling: a config spending more in one release "
                        f"is refused before any data is read (default: "
                        f"{DEFAULT_MAX_RELEASE_EPSILON}, or the cap if smaller; set at "
                        "enrolment)")
    p.add_argument("--max-release-delta", metavar="DELTA",
                   help="per-release delta ceiling: a config spending more delta in one "
                        "release (sparse grid, cohort Gaussian sums, online gradients) is "
                        f"refused before any data is read (default: {DEFAULT_MAX_RELEASE_DELTA}, "
                        "the largest any valid config may spend; set at enrolment)")


def build_parser(doc: str) -> argparse.ArgumentParser:
    common = global_options(defaults=False)
    summary, _, epilog = doc.partition("Exit codes:")
    parser = argparse.ArgumentParser(
        prog="fedod-participant", description=summary.strip().replace("``", ""),
        epilog="exit codes:" + epilog, formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[global_options(defaults=True)])
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
    p.add_argument("--token", help="credential (prefer --token-file or FEDOD_PARTICIPANT_TOKEN; "
                   "one starting with '-' is written --token=VALUE)")
    p.add_argument("--epsilon-cap", required=True, metavar="EPS",
                   help="local epsilon cap over all releases; no config can raise it")
    p.add_argument("--delta-cap", default="0", metavar="DELTA", help="local delta cap (0)")
    p.add_argument("--consortium-key", metavar="KEY",
                   help="the consortium's public key (base64, PEM or a PEM file, from your "
                   "data-protection officer's 'fedod-consortium keygen'): secure rounds run "
                   "only with members it certified; required for secure rounds")
    ceiling_arg(p)
    add("identity", "print this participant's identity public key (send it to your "
                    "data-protection officer, who certifies it with 'fedod-consortium sign')")
    p = add("approve", "fetch a study config and approve the columns it releases; needed "
                       "when a new config version releases other columns than approved "
                       "(the first release of a study approves its columns)")
    p.add_argument("study", help="study id")
    p = add("config", "fetch and verify a study config (signature, expiry, no downgrade, "
                      "hash digest) and remember its version")
    p.add_argument("study", help="study id")
    data_args(add("check-data", "fetch the study config and check a data file against its "
                                 "schema; no data and no release is sent"))
    p = add("contribute", "release noisy histograms of a data file; if an earlier release is "
                          "stored but unacknowledged, re-send it byte for byte instead (no new "
                          "noise) and stop. Once the data is read the release is charged and "
                          "sent at the send slot; if the data cannot be used, noise-only "
                          "counts go out in its place (exit 3)")
    data_args(p)
    release_args(p)
    score_args(add("score", "score local records against the global model and write scores"))
    p = add("run", "unattended round, safe to rerun: enrol if needed, release at most once "
                   "per config version (a secure study: join the open round, or resume the "
                   "one this participant is in, until its sum is revealed), wait for "
                   "--min-contributors, score")
    score_args(p)
    release_args(p)
    ceiling_arg(p)
    p.add_argument("--coordinator", metavar="URL", help="coordinator URL (first run only)")
    p.add_argument("--fingerprint", metavar="sha256:HEX", help="pinned key (first run only)")
    p.add_argument("--fingerprint-file", metavar="FILE", help="file holding the fingerprint")
    p.add_argument("--consortium-key", metavar="KEY",
                   help="consortium public key to pin (first run only; secure studies)")
    p.add_argument("--identity-out", metavar="FILE",
                   help="secure studies: write this participant's identity public key to FILE "
                        "(as 'identity --json' prints it) for the data-protection officer")
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
    data_args(p)
    p.add_argument("--wait", type=float, default=600.0, metavar="S",
                   help="give up if no round is open within S seconds, or when the "
                        "coordinator has not answered a request for S seconds (600)")
    p.add_argument("--stop-after", choices=("keys", "masked"), default=None,
                   help="drill: leave right after that message was accepted, as a "
                        "participant lost at that point would")
    p.add_argument("--send-slot", type=float, default=SETTINGS.send_slot, metavar="S",
                   help="the masked vector leaves S seconds after the roster was read (the "
                        "next multiple if reading the data took longer), so when it leaves "
                        "does not depend on the row count; 0 disables (tests and demos only)")
    p = add("stream", STREAM_HELP)
    p.add_argument("study", help="study id (its config must have an online section)")
    p.add_argument("--watch", metavar="DIR", type=Path,
                   help="read files appearing in DIR (name order; dot files ignored) "
                        "instead of stdin")
    p.add_argument("--once", action="store_true",
                   help="with --watch: read the files present now, then stop")
    p.add_argument("--out", metavar="FILE", type=Path,
                   help="append score lines (CSV, flushed per record; default: stdout)")
    p.add_argument("--labels", metavar="FILE", type=Path,
                   help="labels file the reviewer appends 'id,label' lines to "
                        "(1 = outlier, 0 = inlier)")
    p.add_argument("--id-column", default="id", metavar="NAME",
                   help="record id field (default: id; missing: the record's position)")
    p.add_argument("--ignore-column", metavar="NAME", action="append", default=[],
                   help="field to skip, e.g. an evaluation label (repeatable); any other "
                        "field that is not a feature or the id stops the stream (exit 3)")
    p.add_argument("--clock", choices=("wall", "ticks"), default="wall",
                   help="schedule clock: 'wall' (default) follows the config's calendar "
                        "windows; 'ticks' reads {\"tick\": N} lines in the input as "
                        "'window N has begun' (replays and tests)")
    p.add_argument("--wait-labels", action="store_true",
                   help="at the end of the input, wait until every queried record is "
                        "labelled (polling the labels file)")
    p = add("cohorts", "take part in the study's private cohort rounds (one noisy vector per "
                       "round, drawn once, charged on both ledgers before any noise is "
                       "drawn), then print the released cohorts: size, centre, rule path")
    data_args(p)
    p.add_argument("--approve-schema", action="store_true",
                   help="approve the columns the current config releases, if they changed")
    p.add_argument("--send-slot", type=float, default=SETTINGS.send_slot, metavar="S",
                   help="send each round's vector S seconds after reading the round's state, "
                        "however long reading the data takes (env FEDOD_SEND_SLOT; default: "
                        f"{SETTINGS.send_slot:g})")
    p.add_argument("--wait", type=float, default=600.0, metavar="S",
                   help="give up after S seconds without a round to send or a released "
                        "model, or without an answer from the coordinator (600); rerunning "
                        "resumes")
    p.add_argument("--stop-after", choices=("drawn",), default=None,
                   help="drill: leave right after a round's noisy vector was stored, before "
                        "sending it (the next run re-sends the same bytes)")
    add("ledger", "list every local release and the total privacy spent")
    add("status", "show enrolment, local budget, pending releases, coordinator's view")
    return parser
