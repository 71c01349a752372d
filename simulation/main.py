"""``fedod-simulate``: the whole system on one machine, for real.

Starts a coordinator process on loopback (SQLite in a temporary directory unless
``--database-url``), creates a study and N hospitals through the real admin API, splits a real
medical dataset across them unevenly (see :mod:`simulation.demo_data`), runs every hospital
as its own ``fedod-participant`` process over HTTP (enrol, contribute, score), and prints per
hospital: its size, AUC scoring alone, AUC with the federated private model, AUC of a
centralised non-private model on the pooled data, and epsilon spent / cap.

The labels never leave the simulation: each hospital's CSV carries them for evaluation only,
and the participant CLI is told to ignore that column.

The parts: :mod:`simulation.parser` (options), :mod:`simulation.processes` (start-up),
:mod:`simulation.hospitals` (the hospitals' steps), :mod:`simulation.report` (AUCs, table),
:mod:`simulation.stream` (``--stream``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx

from simulation import demo_data as dd
from simulation.hospitals import STUDY, simulate, study_request
from simulation.parser import build_parser
from simulation.processes import free_port, start_coordinator
from simulation.report import HospitalResult, format_table, json_ready

__all__ = ["build_parser", "export", "load_data", "main", "run"]


def run(args: argparse.Namespace) -> tuple[list[HospitalResult], dict[str, Any]]:
    """Run the simulation; return the table rows and run facts."""
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="fedod-sim-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    data = load_data(args)
    hospitals = dd.split_hospitals(data.X, data.y, args.hospitals, args.seed)
    epsilon = Decimal(args.epsilon)
    proc, url, admin = start_coordinator(workdir, args.database_url, args.port or free_port())
    try:
        rows, facts = simulate(args, workdir, data, hospitals, epsilon, url, admin)
    except BaseException:
        proc.terminate()
        raise
    facts.update(coordinator=url, admin_token=admin, workdir=str(workdir))
    if args.serve:
        facts["coordinator_pid"] = proc.pid
        return rows, facts | {"_proc": proc}
    proc.terminate()
    proc.wait(timeout=20)
    return rows, facts


def export(args: argparse.Namespace) -> None:
    """Write ``DIR/study.json`` (StudyCreate) and ``DIR/<hospital>/data.csv``; run nothing.
    A secure study's rounds open ``when_ready`` (docker-compose's hospitals run unattended)."""
    root = Path(args.export)
    data = load_data(args)
    hospitals = dd.split_hospitals(data.X, data.y, args.hospitals, args.seed)
    root.mkdir(parents=True, exist_ok=True)
    spec = study_request(data, Decimal(args.epsilon), len(hospitals), args.aggregation)
    if args.aggregation == "secure":  # unattended hospitals: round 1 opens once all are ready
        spec["aggregation"]["open_rounds"] = "when_ready"
    (root / "study.json").write_text(json.dumps(spec, indent=2))
    for h in hospitals:
        (root / h.name).mkdir(exist_ok=True)
        dd.write_hospital_csv(root / h.name / "data.csv", data, h.rows)
        print(f"{root / h.name / 'data.csv'}: {h.kind}, {h.rows.size} records")
    print(f"{root / 'study.json'}: study {STUDY}")


def load_data(args: argparse.Namespace) -> dd.Dataset:
    """The ``--dataset`` CSV, or the bundled breast cancer data."""
    if args.dataset:
        return dd.load_csv_dataset(Path(args.dataset), args.label_column)
    return dd.load_breast_cancer_outliers(args.seed)


def main(argv: list[str] | None = None) -> int:
    from common.cli import quiet_broken_pipe

    return quiet_broken_pipe(lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.hospitals < 2:
        build_parser().error("--hospitals must be at least 2")
    if args.aggregation is None:
        args.aggregation = "secure" if args.hospitals >= 3 else "independent"
    if args.aggregation == "secure" and args.hospitals < 3:
        build_parser().error("secure aggregation needs at least 3 hospitals")
    try:
        if args.export:
            export(args)
            return 0
        if args.stream:
            from simulation.stream import print_stream, run_stream

            result = run_stream(args)
            if args.json:
                print(json.dumps(json_ready(result), indent=2, allow_nan=False))
            else:
                print_stream(result)
            return 0
        rows, facts = run(args)
    except httpx.HTTPStatusError as exc:
        print(f"fedod-simulate: error: coordinator said {exc.response.status_code}: "
              f"{exc.response.text[:500]}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        raise  # the reader closed stdout: quiet_broken_pipe ends the command
    except (ValueError, OSError, ArithmeticError) as exc:
        print(f"fedod-simulate: error: {exc}", file=sys.stderr)
        return 2
    proc = facts.pop("_proc", None)
    if args.json:
        print(json.dumps(json_ready({"hospitals": [asdict(r) for r in rows], **facts}),
                         indent=2, allow_nan=False))
    else:
        split = ", ".join(f"{k} {v}" for k, v in facts["split"].items())
        print(f"\ndataset: {facts['dataset']}; seed {facts['seed']}; split: {split}")
        print(f"epsilon per hospital release: {facts['epsilon_per_release']} "
              f"({facts['aggregation']} aggregation)\n")
        print(format_table(rows))
        print(
            "\nAUC alone / centralised: non-private LSH iTables fitted on the hospital's own "
            "data / on the pooled data.\nAUC federated: LSH iTables from the merged private "
            "model; (grid): grid k-NN from the merged\nprivate grid ('-': no grid, as under "
            "secure aggregation); (combined): the participant's combined outlier_score."
        )
        print(f"\nscore files: {facts['workdir']}/<hospital>/scores.csv")
        print(f"dashboard:   {facts['coordinator']}/admin  (admin token: {facts['admin_token']})")
        if proc is None:
            print("             (the coordinator has stopped; rerun with --serve to browse it)")
    if proc is not None:
        print("coordinator running; Ctrl-C to stop", file=sys.stderr)
        try:
            proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
