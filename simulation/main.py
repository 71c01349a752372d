"""``fedod-simulate``: the whole system on one machine, for real.

Starts a coordinator process on loopback (SQLite in a temporary directory unless
``--database-url``), creates a study and N hospitals through the real admin API, splits a real
medical dataset across them unevenly (see :mod:`simulation.demo_data`), runs every hospital
as its own ``fedod-participant`` process over HTTP (enrol, contribute, score), and prints per
hospital: its size, AUC scoring alone, AUC with the federated private model, AUC of a
centralised non-private model on the pooled data, and epsilon spent / cap.

The labels never leave the simulation: each hospital's CSV carries them for evaluation only,
and the participant CLI is told to ignore that column.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from common.config import StudyConfig
from common.detectors import LSHiTables
from common.signing import SignedConfig, generate_key, load_private_key
from participant.cli.consortium import certify, raw_key
from simulation import demo_data as dd
from simulation.report import HospitalResult, auc, format_table, read_scores

STUDY = "sim-study"
# Public, domain-knowledge grid features for the default data (tumour size, texture and shape:
# the markers pathologists grade). A custom dataset uses its first three features.
GRID_FEATURES = ["worst_radius", "worst_texture", "worst_concave_points"]
SEND_SLOT = 2.0
"""Send slot of the demo hospitals (small data on loopback; the CLI default is 30 s)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_coordinator(workdir: Path, database_url: str | None, port: int) -> tuple[Any, str, str]:
    """Start ``fedod-coordinator serve`` and wait until ``/readyz`` answers 200."""
    token = secrets.token_urlsafe(32)
    env = dict(os.environ, FEDOD_DATA_DIR=str(workdir / "coordinator"), FEDOD_ADMIN_TOKEN=token)
    if database_url:
        env["FEDOD_DATABASE_URL"] = database_url
    log = (workdir / "coordinator.log").open("wb")
    cmd = [sys.executable, "-m", "coordinator.cli.main", "serve", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"coordinator exited early; see {workdir / 'coordinator.log'}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return proc, url, token
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"coordinator did not become ready; see {workdir / 'coordinator.log'}")


def study_request(
    data: dd.Dataset, epsilon: Decimal, hospitals: int = 0, aggregation: str = "independent"
) -> dict[str, Any]:
    """The study an administrator would create for this dataset (public bounds only).

    Small data under noise favours fewer, coarser tables: 50 tables of expected size 16, and
    90 % of each release's epsilon on LSH iTables, 10 % on the grid (3 public features).
    ``aggregation="secure"``: release rounds with secure aggregation over all ``hospitals``
    (no dropouts, one colluder: each hospital sees the model), LSH tables only.
    """
    bounds = dd.study_bounds(data.X)
    features = [
        {"name": n, "lo": lo, "hi": hi} for n, (lo, hi) in zip(data.features, bounds, strict=True)
    ]
    eps_grid = (epsilon / 10).quantize(Decimal("0.000001"))
    grid = [f for f in GRID_FEATURES if f in data.features] or data.features[:3]
    if aggregation == "secure":
        return {
            "study_id": STUDY,
            "features": features,
            "lsh": {"n_tables": 50, "sample_size": 16},
            "privacy": {"epsilon_lsh": str(epsilon)},
            "aggregation": {"mode": "secure", "cohort_size": hospitals, "max_dropouts": 0,
                            "max_colluders": 1},
        }
    return {
        "study_id": STUDY,
        "features": features,
        "lsh": {"n_tables": 50, "sample_size": 16},
        "grid": {
            "bins": 3,
            "features": grid,
            "k": 10,
            "max_depth": 3,
        },
        "privacy": {"epsilon_lsh": str(epsilon - eps_grid), "epsilon_grid": str(eps_grid)},
    }


def _run_all(cmds: list[list[str]], logs: list[Path]) -> None:
    """Run one process per hospital concurrently; fail loudly if any fails."""
    procs = []
    for cmd, log in zip(cmds, logs, strict=True):
        with log.open("ab") as fh:
            procs.append(subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT))
    for proc, log, cmd in zip(procs, logs, cmds, strict=True):
        if proc.wait() != 0:
            tail = log.read_text(errors="replace")[-2000:]
            raise SystemExit(f"hospital process failed ({' '.join(cmd)}):\n{tail}")


def run(args: argparse.Namespace) -> tuple[list[HospitalResult], dict[str, Any]]:
    """Run the simulation; return the table rows and run facts."""
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="fedod-sim-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    data = load_data(args)
    hospitals = dd.split_hospitals(data.X, data.y, args.hospitals, args.seed)
    epsilon = Decimal(args.epsilon)
    proc, url, admin = start_coordinator(workdir, args.database_url, args.port or _free_port())
    try:
        rows, facts = _simulate(args, workdir, data, hospitals, epsilon, url, admin)
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


def upload_membership(api: httpx.Client, consortium: Ed25519PrivateKey, workdir: Path,
                      hospitals: list[dd.Hospital]) -> None:
    """Play the consortium's data-protection officer: certify every hospital's identity key
    (read from its state, as each would send it) and hand the certificate to the admin."""
    signed = SignedConfig.model_validate(api.get(f"/v1/studies/{STUDY}/config").json())
    params = StudyConfig.model_validate_json(signed.payload).aggregation
    assert params is not None
    members = {
        h.name: raw_key(load_private_key(workdir / h.name / "state" / "identity_key.pem")
                        .public_key())
        for h in hospitals
    }
    expires = datetime.now(UTC) + timedelta(days=1)
    membership = certify(STUDY, params, members, consortium, expires_at=expires)
    api.put(f"/v1/studies/{STUDY}/membership",
            json=membership.model_dump()).raise_for_status()


def _simulate(
    args: argparse.Namespace,
    workdir: Path,
    data: dd.Dataset,
    hospitals: list[dd.Hospital],
    epsilon: Decimal,
    url: str,
    admin: str,
) -> tuple[list[HospitalResult], dict[str, Any]]:
    api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=60)
    consortium = generate_key()  # the simulator also plays the consortium's DPO
    r = api.post("/v1/studies",
                 json=study_request(data, epsilon, len(hospitals), args.aggregation))
    r.raise_for_status()
    fingerprint = api.get("/v1/key").json()["key_id"]
    cap = str(epsilon * args.cap_releases)
    cli = [sys.executable, "-m", "participant.cli.main", "--no-progress"]
    for h in hospitals:
        hdir = workdir / h.name
        hdir.mkdir(exist_ok=True)
        dd.write_hospital_csv(hdir / "data.csv", data, h.rows)
        r = api.post("/v1/participants", json={"name": h.name, "epsilon_cap": cap})
        r.raise_for_status()
        token_file = hdir / "token"
        token_file.write_text(r.json()["token"])
        token_file.chmod(0o600)
        api.post(f"/v1/studies/{STUDY}/members", json={"participant": h.name}).raise_for_status()
    logs = [workdir / h.name / "participant.log" for h in hospitals]
    state = [["--state", str(workdir / h.name / "state")] for h in hospitals]
    cols = ["--id-column", dd.ID_COLUMN, "--ignore-column", dd.LABEL_COLUMN]
    say = print if not args.json else (lambda *_: None)
    say(f"coordinator {url}; {len(hospitals)} hospitals enrolled; releasing noisy histograms ...")
    _run_all(
        [
            [
                *cli,
                *s,
                "enrol",
                "--coordinator",
                url,
                "--fingerprint",
                fingerprint,
                "--token-file",
                str(workdir / h.name / "token"),
                "--epsilon-cap",
                cap,
                "--max-release-epsilon",
                str(epsilon),
                *(["--consortium-key", raw_key(consortium.public_key())]
                  if args.aggregation == "secure" else []),
            ]
            for h, s in zip(hospitals, state, strict=True)
        ],
        logs,
    )
    data_args = [[STUDY, str(workdir / h.name / "data.csv"), *cols] for h in hospitals]
    slot = ["--send-slot", str(SEND_SLOT)]
    if args.aggregation == "secure":
        upload_membership(api, consortium, workdir, hospitals)
        api.post(f"/v1/studies/{STUDY}/rounds").raise_for_status()
        say("secure aggregation round: each hospital masks one noisy vector ...")
    release = ["round", *slot] if args.aggregation == "secure" else ["contribute", *slot]
    _run_all([[*cli, *s, *release, *d] for s, d in zip(state, data_args, strict=True)], logs)
    say("every hospital contributed; scoring locally with the global model ...")
    outs = [workdir / h.name / "scores.csv" for h in hospitals]
    _run_all(
        [
            [*cli, *s, "score", *d, "--output", str(o)]
            for s, d, o in zip(state, data_args, outs, strict=True)
        ],
        logs,
    )
    budgets = {b["participant"]: b for b in api.get("/v1/admin/budget").json()}
    central = LSHiTables(random_state=args.seed).fit(data.X)
    rows = []
    for h, out in zip(hospitals, outs, strict=True):
        y = data.y[h.rows]
        fed = read_scores(out, [f"r{r:06d}" for r in h.rows])
        auc_fed = {col: auc(y, fed[col]) for col in fed}
        alone = LSHiTables(random_state=args.seed).fit(data.X[h.rows])
        rows.append(
            HospitalResult(
                hospital=h.name,
                kind=h.kind,
                records=int(h.rows.size),
                outliers=int(y.sum()),
                auc_alone=auc(y, alone.decision_function(data.X[h.rows])),
                auc_federated=auc_fed["score_lsh"],
                auc_federated_grid=auc_fed.get("score_grid", float("nan")),
                auc_federated_combined=auc_fed["outlier_score"],
                auc_centralised=auc(y, central.decision_function(data.X[h.rows])),
                epsilon_spent=budgets[h.name]["epsilon_spent"],
                epsilon_cap=budgets[h.name]["epsilon_cap"],
                scores=str(out),
            )
        )
    facts = {
        "dataset": data.name,
        "seed": args.seed,
        "epsilon_per_release": str(epsilon),
        "aggregation": args.aggregation,
        "split": {h.name: h.rows.size for h in hospitals},
    }
    return rows, facts


def export(args: argparse.Namespace) -> None:
    """Write ``DIR/study.json`` (StudyCreate) and ``DIR/<hospital>/data.csv``; run nothing."""
    root = Path(args.export)
    data = load_data(args)
    hospitals = dd.split_hospitals(data.X, data.y, args.hospitals, args.seed)
    root.mkdir(parents=True, exist_ok=True)
    spec = study_request(data, Decimal(args.epsilon), len(hospitals), args.aggregation)
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


def _positive_decimal(text: str) -> str:
    try:
        ok = Decimal(text) > 0
    except ArithmeticError:
        ok = False
    if not ok:
        raise argparse.ArgumentTypeError(f"not a positive number: {text!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fedod-simulate",
        description="Run a coordinator and N hospitals as real processes on this machine, "
        "split a real medical dataset across them, and compare AUC alone / federated "
        "(private) / centralised (non-private).",
    )
    p.add_argument("--hospitals", type=int, default=3, help="number of hospitals, >= 2 (3)")
    p.add_argument(
        "--epsilon",
        default="1.0",
        type=_positive_decimal,
        help="epsilon each hospital spends on its one release, LSH + grid (1.0)",
    )
    p.add_argument(
        "--cap-releases",
        type=int,
        default=3,
        help="each hospital's cap, in releases of --epsilon (3)",
    )
    p.add_argument(
        "--dataset",
        help="CSV with a header, numeric features and a 0/1 label "
        "column (default: scikit-learn's bundled breast cancer data)",
    )
    p.add_argument("--label-column", default=dd.LABEL_COLUMN, help="label column (label)")
    p.add_argument(
        "--seed",
        type=int,
        default=7,
        help="seed of the split and of the "
        "non-private baselines (7); privacy noise is never seeded",
    )
    p.add_argument("--database-url", help="coordinator database (default: SQLite in workdir)")
    p.add_argument("--workdir", help="where data, state and score files go (default: temp)")
    p.add_argument("--port", type=int, default=0, help="coordinator port (default: free)")
    p.add_argument(
        "--serve",
        action="store_true",
        help="keep the coordinator running afterwards (Ctrl-C stops it)",
    )
    p.add_argument(
        "--aggregation",
        choices=("secure", "independent"),
        help="secure: one release round with secure aggregation and one noise draw on the sum "
        "(LSH tables only; default from 3 hospitals up); independent: every hospital adds its "
        "own full noise (default for 2)",
    )
    from simulation.stream import add_arguments as stream_arguments

    stream_arguments(p)
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--export", metavar="DIR", help="only write DIR/study.json and each "
                   "hospital's DIR/<hospital>/data.csv (for docker-compose), then exit")
    return p


def main(argv: list[str] | None = None) -> int:
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

            result = run_stream(args, start_coordinator, _free_port)
            print(json.dumps(result, indent=2)) if args.json else print_stream(result)
            return 0
        rows, facts = run(args)
    except httpx.HTTPStatusError as exc:
        print(f"fedod-simulate: error: coordinator said {exc.response.status_code}: "
              f"{exc.response.text[:500]}", file=sys.stderr)
        return 1
    except (ValueError, OSError, ArithmeticError) as exc:
        print(f"fedod-simulate: error: {exc}", file=sys.stderr)
        return 2
    proc = facts.pop("_proc", None)
    if args.json:
        print(json.dumps({"hospitals": [asdict(r) for r in rows], **facts}, indent=2))
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
