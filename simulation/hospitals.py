"""The hospitals' steps: the study an administrator creates for the demo data, each hospital's
``fedod-participant`` processes (enrol, release, score) and, for secure aggregation, the
consortium's certificate of the members.

The simulation also plays the consortium's data-protection officer, with its tool
``fedod-consortium`` run as a process (keygen, sign).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx

from common.secagg.membership import MembershipBody
from common.study.config import StudyConfig
from common.study.signing import SignedConfig
from simulation import demo_data as dd
from simulation.processes import CONSORTIUM, PARTICIPANT, run_all, run_json
from simulation.report import HospitalResult, evaluate

STUDY = "sim-study"
# Public, domain-knowledge grid features for the default data (tumour size, texture and shape:
# the markers pathologists grade). A custom dataset uses its first three features.
GRID_FEATURES = ["worst_radius", "worst_texture", "worst_concave_points"]
SEND_SLOT = 2.0
"""Send slot of the demo hospitals (small data on loopback; the CLI default is 30 s)."""


def study_request(
    data: dd.Dataset, epsilon: Decimal, hospitals: int = 0, aggregation: str = "independent"
) -> dict[str, Any]:
    """The study an administrator would create for this dataset (public bounds only).

    The administrator declares the cohort (``hospitals``) and the expected records per
    hospital (the demo's even split; in a real study a number agreed in advance, never
    measured), and leaves the LSH tables and the grid's bins, ``k`` and projection unset,
    so the coordinator chooses them by the public rule (``common.detectors.rules``).
    Independent releases spend 90 % of each release's epsilon on LSH iTables, 10 % on the
    grid (3 public features). ``aggregation="secure"``: release rounds with secure
    aggregation over all ``hospitals`` (no dropouts, one colluder: each hospital sees the
    model), LSH tables only.
    """
    bounds = dd.study_bounds(data.X)
    features = [
        {"name": n, "lo": lo, "hi": hi} for n, (lo, hi) in zip(data.features, bounds, strict=True)
    ]
    cohort: dict[str, Any] = {}
    if hospitals >= 1:
        cohort = {"cohort_size": hospitals, "expected_records": max(1, len(data.X) // hospitals)}
    eps_grid = (epsilon / 10).quantize(Decimal("0.000001"))
    grid = [f for f in GRID_FEATURES if f in data.features] or data.features[:3]
    if aggregation == "secure":
        return {
            "study_id": STUDY,
            "features": features,
            "privacy": {"epsilon_lsh": str(epsilon)},
            "aggregation": {"mode": "secure", **cohort, "max_dropouts": 0,
                            "max_colluders": 1},
        }
    return {
        "study_id": STUDY,
        "features": features,
        "grid": {"features": grid, "max_depth": 3},
        "privacy": {"epsilon_lsh": str(epsilon - eps_grid), "epsilon_grid": str(eps_grid)},
        **({"aggregation": {"mode": "independent", **cohort}} if cohort else {}),
    }


def consortium_key(workdir: Path) -> str:
    """Play the consortium's data-protection officer: a new consortium key
    (``fedod-consortium keygen``, private PEM in ``workdir``); return its public key."""
    pem = workdir / "consortium.pem"
    pem.unlink(missing_ok=True)  # a new consortium for every run
    [doc] = run_json([[*CONSORTIUM, "keygen", "--out", str(pem)]])
    return str(doc["public_key"])


def upload_membership(api: httpx.Client, workdir: Path, state: list[list[str]]) -> bool:
    """Each hospital prints its identity public key (``fedod-participant identity``, as it
    would send it to the DPO); the DPO signs the members (``fedod-consortium sign``) and the
    admin uploads the certificate. True when the study's masking graph is sparse (about 33
    hospitals or more): its rounds then wait for the consortium's beacon."""
    signed = SignedConfig.model_validate(api.get(f"/v1/studies/{STUDY}/config").json())
    params = StudyConfig.model_validate_json(signed.payload).aggregation
    assert params is not None
    identities = run_json([[*PARTICIPANT, *s, "--json", "identity"] for s in state])
    body = MembershipBody(
        study_id=STUDY, version=1, expires_at=datetime.now(UTC) + timedelta(days=1),
        cohort_size=params.cohort_size or 0, max_dropouts=params.max_dropouts,
        max_colluders=params.max_colluders,
        members={doc["participant"]: doc["identity_key"] for doc in identities},
    )
    members = workdir / "members.json"
    members.write_text(body.model_dump_json())
    [membership] = run_json([[*CONSORTIUM, "sign", "--key", str(workdir / "consortium.pem"),
                              str(members)]])
    (workdir / "membership.json").write_text(json.dumps(membership))
    api.put(f"/v1/studies/{STUDY}/membership", json=membership).raise_for_status()
    return params.needs_beacon


def beacon(workdir: Path, url: str) -> subprocess.Popen[bytes]:
    """The DPO's ``fedod-consortium beacon``, watching the study's rounds (stopped by the
    caller once every hospital has released)."""
    with (workdir / "beacon.log").open("ab") as log:
        return subprocess.Popen(
            [*CONSORTIUM, "beacon", "--key", str(workdir / "consortium.pem"), "--coordinator",
             url, "--study", STUDY, "--membership", str(workdir / "membership.json"),
             "--record", str(workdir / "beacon-record.jsonl"), "--poll", "0.2"],
            stdout=log, stderr=subprocess.STDOUT)


def simulate(
    args: argparse.Namespace,
    workdir: Path,
    data: dd.Dataset,
    hospitals: list[dd.Hospital],
    epsilon: Decimal,
    url: str,
    admin: str,
) -> tuple[list[HospitalResult], dict[str, Any]]:
    """Create the study and the hospitals through the admin API, then run every hospital's
    ``fedod-participant`` steps as processes: enrol, release (``contribute``, or a secure
    ``round`` after the consortium certified the members), score; return the table rows."""
    api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=60)
    secure = args.aggregation == "secure"
    consortium = consortium_key(workdir) if secure else ""  # the simulator plays the DPO too
    r = api.post("/v1/studies",
                 json=study_request(data, epsilon, len(hospitals), args.aggregation))
    r.raise_for_status()
    fingerprint = api.get("/v1/key").json()["key_id"]
    cap = str(epsilon * args.cap_releases)
    cli = [*PARTICIPANT]
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
    run_all(
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
                *(["--consortium-key", consortium] if secure else []),
            ]
            for h, s in zip(hospitals, state, strict=True)
        ],
        logs,
    )
    data_args = [[STUDY, str(workdir / h.name / "data.csv"), *cols] for h in hospitals]
    slot = ["--send-slot", str(SEND_SLOT)]
    watcher = None
    if secure:
        if upload_membership(api, workdir, state):
            watcher = beacon(workdir, url)
        api.post(f"/v1/studies/{STUDY}/rounds").raise_for_status()
        say("secure aggregation round: each hospital masks one noisy vector ...")
    release = ["round", *slot] if secure else ["contribute", *slot]
    try:
        run_all([[*cli, *s, *release, *d] for s, d in zip(state, data_args, strict=True)], logs)
    finally:
        if watcher is not None:
            watcher.terminate()
            watcher.wait()
    say("every hospital contributed; scoring locally with the global model ...")
    outs = [workdir / h.name / "scores.csv" for h in hospitals]
    run_all(
        [
            [*cli, *s, "score", *d, "--output", str(o)]
            for s, d, o in zip(state, data_args, outs, strict=True)
        ],
        logs,
    )
    budgets = {b["participant"]: b for b in api.get("/v1/admin/budget").json()}
    rows = evaluate(data, hospitals, outs, budgets, args.seed)
    facts = {
        "dataset": data.name,
        "seed": args.seed,
        "epsilon_per_release": str(epsilon),
        "aggregation": args.aggregation,
        "split": {h.name: h.rows.size for h in hospitals},
    }
    return rows, facts
