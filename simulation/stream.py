"""``fedod-simulate --stream``: streaming mode with a simulated reviewer, as real processes.

A coordinator process, a study with an online section, and N hospitals, each running
``fedod-participant stream`` as its own process on its share of a record stream. The reviewer
is simulated: each hospital's labels file already holds the held-out label of every one of its
records, and the stream reads a label only for a record its private query rule picked. The
hospitals stream in ``--chunks`` rounds, one schedule window each: every round restarts each
stream on its replayed input (records already consumed are skipped) ending with a tick that
closes the window (``--clock ticks``: window k of the schedule is round k + 1, with one
window's slots per hospital and round). The learner is DP-FTRL by default (``--algorithm``):
each hospital's windows are the leaves of its own tree and each release is the increment of
its noisy prefix sum; the coordinator adds the hospitals' increments of a window in one step
(``step_releases`` = the number of hospitals). With ``--algorithm flmb`` (the baseline) the
releases are noisy batch sums and the step is one SGD step on all the hospitals' queried slots
of the window. The same private learner run on the pooled stream in one process is printed
beside it (the single-stream figure), with the non-private baselines. By default window 0 is the
centring window (``centre_window = 0``): round 1 queries nothing, each hospital releases the
noisy sum of its records, and the coordinator serves their centre, on which every later record
(and the test set, for the printed error) is centred; ``--no-centre`` runs the uncentred
learner instead. After each round the simulation
evaluates the coordinator's online classifier (the iterate average when the config's
``average`` is on, as the streams score) on a held-out test set and prints the test error against
the labels requested so far, beside two non-private baselines on the same pooled stream
(the online learner labelling every record; a batch linear SVM).

Default data: scikit-learn's bundled digits, 0 (outlier, +1) against 9 (-1), 108 test records,
the rest resampled into the stream (``--stream-records``), pixel bounds 0..16 (public). A
resampled record appears several times in the stream; under the slot relation each copy is a
slot of its own (docs/ONLINE.md), which is *not* a guarantee for the person behind it.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from numpy.typing import NDArray

from common.online.ftrl import OnlineFTRL
from common.online.learner import OnlineConfig, OnlineSVM
from common.online.params import OnlineParams, to_ball
from common.online.wire import decode_vector
from simulation.processes import PARTICIPANT, free_port, start_coordinator

STUDY = "sim-stream"


def digits_stream(n_stream: int, seed: int) -> tuple[list[str], NDArray[Any], NDArray[Any],
                                                      NDArray[Any], NDArray[Any]]:
    """Features, stream X/y, test X/y (y: +1 for digit 0, -1 for digit 9)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    keep = np.isin(d.target, [0, 9])
    X, y = d.data[keep].astype(np.float64), np.where(d.target[keep] == 0, 1, -1)
    rng = np.random.default_rng(seed)  # split and resampling only, never noise
    perm = rng.permutation(len(y))
    test, train = perm[:108], perm[108:]
    reps = rng.choice(train, size=n_stream)
    return [f"pixel_{i}" for i in range(64)], X[reps], y[reps], X[test], y[test]


def _error(w: NDArray[Any], Z: NDArray[Any], y: NDArray[Any]) -> float:
    return float(np.mean(np.where(Z @ w >= 0, 1, -1) != y))


def _baselines(params: OnlineParams, Z: NDArray[Any], y: NDArray[Any], Zt: NDArray[Any],
               yt: NDArray[Any], hospitals: int) -> dict[str, float]:
    from sklearn.svm import LinearSVC

    online = OnlineSVM(OnlineConfig(params.dim, params.radius_x, params.radius_w, params.lam,
                                    params.eta0, 1, "labels"))
    for z, label in zip(Z, y, strict=True):
        online.step(z, functools.partial(int, label))
    svc = LinearSVC(C=1.0).fit(Z, y)
    return {"online, every record labelled, no noise": _error(online.w_, Zt, yt),
            "batch LinearSVC, no noise": float(np.mean(svc.predict(Zt) != yt)),
            "majority class": float(min(np.mean(yt == 1), np.mean(yt == -1))),
            **_single_stream(params, Z, y, Zt, yt, hospitals)}


def _single_stream(params: OnlineParams, Z: NDArray[Any], y: NDArray[Any], Zt: NDArray[Any],
                   yt: NDArray[Any], hospitals: int, runs: int = 5) -> dict[str, float]:
    """The same private learner on the pooled stream in one process (pure DP-FTRL, a leaf
    every ``leaf`` labels; centred on the first ``hospitals x window_slots`` records when
    the federation centres), mean test error at the stream's end over ``runs`` runs (fresh
    OpenDP noise): the single-stream figure the federated stream is compared with."""
    if params.algorithm != "ftrl":
        return {}
    centre = 0 if params.centre_window is None else hospitals * params.window_slots
    rule, noise, centre_noise = params.rule(), params.noise(), params.centre_noise()
    errors = []
    for _ in range(runs):
        model = OnlineFTRL(params.ftrl(centre), rule, noise, centre_noise)
        for z, label in zip(Z, y, strict=True):
            model.step(z, functools.partial(int, label))
        errors.append(float(np.mean(model.predict(Zt) != yt)))
    return {f"single stream, same learner and charge ({runs} runs' mean)": float(
        np.mean(errors))}


def _hospital_files(root: Path, features: list[str], X: NDArray[Any], y: NDArray[Any],
                    rows: NDArray[Any]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    with (root / "records.jsonl").open("w") as fh:
        for r in rows:
            fh.write(json.dumps({"id": f"r{r:06d}", **dict(zip(features, X[r].tolist(),
                                                                strict=True))}) + "\n")
    with (root / "labels.csv").open("w") as fh:  # the simulated reviewer's answers
        fh.writelines(f"r{r:06d},{1 if y[r] == 1 else 0}\n" for r in rows)


def _stream_round(cli: list[str], names: list[str], workdir: Path, upto: int, k: int) -> None:
    """Every hospital streams the first ``upto`` of its records (a restart each round), then
    window ``k - 1`` of the schedule ends (tick ``k``): each hospital releases it."""
    procs = []
    for name in names:
        h = workdir / name
        lines = (h / "records.jsonl").read_text().splitlines(keepends=True)[:upto]
        (h / "round.jsonl").write_text("".join(lines) + json.dumps({"tick": k}) + "\n")
        with (h / "round.jsonl").open() as stdin, (h / "participant.log").open("ab") as log:
            procs.append(subprocess.Popen(
                [*cli, "--state", str(h / "state"), "stream", STUDY, "--out",
                 str(h / "scores.csv"), "--labels", str(h / "labels.csv"), "--clock",
                 "ticks"],
                stdin=stdin, stdout=log, stderr=subprocess.STDOUT))
    for name, proc in zip(names, procs, strict=True):
        if proc.wait() != 0:
            tail = (workdir / name / "participant.log").read_text(errors="replace")[-2000:]
            raise SystemExit(f"{name}: stream failed (exit {proc.returncode}):\n{tail}")


def _queried(workdir: Path, names: list[str]) -> int:
    total = 0
    for name in names:
        with (workdir / name / "scores.csv").open() as fh:
            total += sum(int(row["queried"]) for row in csv.DictReader(fh))
    return total


def run_stream(args: argparse.Namespace) -> dict[str, Any]:
    """Run the streaming simulation; returns the rows printed and the run facts."""
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="fedod-stream-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    features, X, y, Xt, yt = digits_stream(args.stream_records, args.seed)
    names = [f"hospital-{i + 1}" for i in range(args.hospitals)]
    split = np.array_split(np.arange(len(y)), args.hospitals)
    per_hospital = max(len(r) for r in split)
    params = OnlineParams(dim=len(features) + 1, p=args.query_p, epsilon_select=args.epsilon,
                          epsilon_gradient=args.epsilon, window_seconds=60,
                          window_slots=-(-per_hospital // args.chunks),
                          step_releases=args.hospitals, algorithm=args.algorithm,
                          centre_window=None if args.no_centre else 0)
    lo, hi = np.zeros(len(features)), np.full(len(features), 16.0)
    proc, url, admin = start_coordinator(workdir, args.database_url, args.port or free_port())
    try:
        api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"},
                           timeout=60)
        api.post("/v1/studies", json={
            "study_id": STUDY, "features": [{"name": f, "lo": 0.0, "hi": 16.0}
                                            for f in features],
            "lsh": {"n_tables": 10}, "privacy": {"epsilon_lsh": "1"},
            "online": params.model_dump(mode="json")}).raise_for_status()
        fingerprint = api.get("/v1/key").json()["key_id"]
        cap = str(params.epoch_cost().epsilon * (args.chunks + 1))  # + the window left open
        cli = [*PARTICIPANT]
        for name, rows in zip(names, split, strict=True):
            _hospital_files(workdir / name, features, X, y, rows)
            doc = api.post("/v1/participants", json={"name": name, "epsilon_cap": cap,
                                                     "delta_cap": "0.001"}).json()
            api.post(f"/v1/studies/{STUDY}/members", json={"participant": name})
            subprocess.run([*cli, "--state", str(workdir / name / "state"), "enrol",
                            "--coordinator", url, "--fingerprint", fingerprint,
                            f"--token={doc['token']}", "--epsilon-cap", cap, "--delta-cap", "0.001",
                            "--max-release-epsilon", cap], check=True, capture_output=True)
        Zt = to_ball(Xt, lo, hi, params.radius_x)
        table = []
        for k in range(1, args.chunks + 1):
            _stream_round(cli, names, workdir, params.window_slots * k, k)
            model = api.get(f"/v1/studies/{STUDY}/online/model").json()
            w = decode_vector(model["average" if params.average else "weights"], params.dim)
            centre = None if model["centre"] is None else decode_vector(model["centre"],
                                                                        params.dim)
            table.append({"records": min(len(y), len(y) * k // args.chunks),
                          "labels_requested": _queried(workdir, names),
                          "steps": model["version"], "centred": centre is not None,
                          "test_error": _error(w, params.rows(Zt, centre), yt)})
        budgets = {b["participant"]: b["epsilon_spent"]
                   for b in api.get("/v1/admin/budget").json()}
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    baselines = _baselines(params, to_ball(X, lo, hi), y, Zt, yt, args.hospitals)
    return {"rounds": table, "baselines": baselines, "algorithm": params.algorithm,
            "epsilon_spent": budgets, "epoch_cost": str(params.epoch_cost()),
            "window_slots": params.window_slots, "centre_window": params.centre_window,
            "workdir": str(workdir), "stream_records": len(y), "test_records": len(yt)}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``--stream`` options of ``fedod-simulate``."""
    p.add_argument("--stream", action="store_true",
                   help="streaming mode instead (docs/ONLINE.md): each hospital runs "
                        "'fedod-participant stream' on its share of a digits 0 vs 9 stream, a "
                        "simulated reviewer answers from the held-out labels; prints test "
                        "error against labels requested")
    p.add_argument("--stream-records", type=int, default=16000, metavar="N",
                   help="--stream: records in the pooled stream (16000)")
    p.add_argument("--query-p", type=float, default=0.09, metavar="P",
                   help="--stream: top query probability of the exponential rule (0.09, "
                        "as in bench_online.py)")
    p.add_argument("--chunks", type=int, default=4, metavar="K",
                   help="--stream: K rounds, one schedule window each (a hospital's share "
                        "/ K slots per window, one noisy release per hospital and window, "
                        "all hospitals' releases of a window summed into one SGD step); the "
                        "test error is printed after each (4)")
    p.add_argument("--algorithm", choices=("ftrl", "flmb"), default="ftrl",
                   help="--stream: the private learner: DP-FTRL (default: each hospital's "
                        "windows are the leaves of its tree, docs/ONLINE.md) or FLMB, the "
                        "per-batch-noise baseline")
    p.add_argument("--no-centre", action="store_true",
                   help="--stream: no centring window (by default window 0, the first "
                        "round, queries nothing and releases each hospital's noisy record "
                        "sum; later records are centred on the coordinator's centre)")


def print_stream(result: dict[str, Any]) -> None:
    print(f"\nstream ({result['algorithm']}): digits 0 vs 9, {result['stream_records']} "
          "records across hospitals, "
          f"{result['test_records']} held-out test records; {result['window_slots']} slots "
          f"per hospital and window, charge per hospital window {result['epoch_cost']}")
    if result["centre_window"] is None:
        print("no centring (--no-centre): records are used uncentred")
    else:
        print(f"centring window {result['centre_window']} (round "
              f"{result['centre_window'] + 1}): no record queried, each hospital releases its "
              "noisy record sum; later records and the test set are centred on the centre")
    print("\n| records streamed | labels requested | steps | test error |")
    print("|---|---|---|---|")
    for r in result["rounds"]:
        print(f"| {r['records']} | {r['labels_requested']} | {r['steps']} | "
              f"{100 * r['test_error']:.1f} % |")
    print("\nbaselines on the same pooled stream (test error):")
    for name, err in result["baselines"].items():
        print(f"  {name}: {100 * err:.1f} %")
    print("epsilon spent: " + ", ".join(f"{k} {v}" for k, v in result["epsilon_spent"].items()))
    print(f"files: {result['workdir']}/<hospital>/(scores.csv, labels.csv, state/)")
