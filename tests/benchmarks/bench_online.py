"""Streaming benchmark: DP online active learning (Ghassemi, Sarwate & Wright, AISec 2016).

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_online.py            # all sets, 10 stream orders
    .venv/bin/python tests/benchmarks/bench_online.py --orders 3 --datasets digits

Prints markdown: test error against labels requested for the private learner (exponential
query rule, epsilon_s = epsilon_g = 1, delta_g = 1e-6), the non-private online learner that
labels every record, and a non-private batch linear SVM (sklearn LinearSVC) on the whole
training stream; then an epsilon sweep. Noise: OpenDP (``common.online.noise``).

Feature scaling uses per-feature min/max of the whole file as a stand-in for a study's public
bounds (a benchmark convenience; a deployment takes them from the signed config).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.svm import LinearSVC

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from common.online import (  # noqa: E402
    ExponentialRule,
    GradientNoise,
    OnlineConfig,
    OnlineParams,
    OnlineSVM,
    make_gradient_noise,
    record_cost,
)

DATA = Path(__file__).resolve().parents[3] / "shared" / "datasets"
CHECKPOINTS = (50, 100, 200, 300, 500)
P_QUERY, RADIUS_W, ETA0, LAM, DELTA = 0.1, 10.0, 1.0, 1e-3, 1e-6


@dataclass
class Stream:
    name: str
    X: np.ndarray  # training stream rows, in the unit ball, last feature a constant (bias)
    y: np.ndarray  # -1 / +1
    Xt: np.ndarray
    yt: np.ndarray
    note: str


def to_ball(X: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Map features to [-1, 1] with public bounds, add a bias feature, scale into the unit ball."""
    span = np.where(hi > lo, hi - lo, 1.0)
    Z = np.hstack([2 * (X - lo) / span - 1, np.ones((len(X), 1))])
    return Z / np.sqrt(Z.shape[1])


def split(name: str, X: np.ndarray, y: np.ndarray, n_test: int, note: str) -> Stream:
    rng = np.random.default_rng(0)  # split only, not noise
    perm = rng.permutation(len(y))
    Z = to_ball(X, X.min(axis=0), X.max(axis=0))
    t, s = perm[:n_test], perm[n_test:]
    return Stream(name, Z[s], y[s], Z[t], y[t], note)


def load(name: str) -> Stream | None:
    if name == "digits":
        d = load_digits()
        keep = np.isin(d.target, [0, 9])
        X, y = d.data[keep], np.where(d.target[keep] == 0, 1, -1)
        lo, hi = np.zeros(64), np.full(64, 16.0)  # pixel range: public
        Z = to_ball(X, lo, hi)
        rng = np.random.default_rng(0)
        perm = rng.permutation(len(y))
        t, s = perm[:108], perm[108:]
        reps = rng.choice(s, size=6000)  # 250 records resampled: see the note
        return Stream(
            "digits 0 vs 9",
            Z[reps],
            y[reps],
            Z[t],
            y[t],
            "250 training records resampled into a 6000-record stream",
        )
    path = DATA / f"{name}.npz"
    if not path.exists():
        return None
    f = np.load(path)
    X, y = f["X"], np.where(f["y"] == 1, 1, -1)
    if name == "http":
        rng = np.random.default_rng(1)
        pick = rng.choice(len(y), size=26_000, replace=False)
        return split(
            "http (KDD99)",
            X[pick],
            y[pick],
            6000,
            "26 000 rows drawn from 567 498; 0.4 % positives",
        )
    return split(name, X, y, 1603, f"ODDS {name}: {len(y)} rows, {y.mean() * 50 + 50:.1f} % +1")


def errors_at(svm: OnlineSVM, s: Stream, order: np.ndarray, marks: tuple[int, ...]) -> list[float]:
    """Run one stream order; test error each time the label count crosses a mark."""
    out: list[float] = []
    for i in order:
        svm.step(s.X[i], lambda i=i: int(s.y[i]))
        if len(out) < len(marks) and svm.queried_ >= marks[len(out)]:
            out.append(float(np.mean(np.where(s.Xt @ svm.coef_ >= 0, 1, -1) != s.yt)))
    last = float(np.mean(np.where(s.Xt @ svm.coef_ >= 0, 1, -1) != s.yt))
    return out + [last] * (len(marks) - len(out)) + [last]


def run(
    s: Stream,
    orders: list[np.ndarray],
    cfg: OnlineConfig,
    rule: ExponentialRule | None,
    noise: GradientNoise | None,
) -> tuple[np.ndarray, float]:
    errs, rates = [], []
    for order in orders:
        svm = OnlineSVM(cfg, rule, noise)
        errs.append(errors_at(svm, s, order, CHECKPOINTS))
        rates.append(svm.queried_ / svm.seen_)
    return 100 * np.mean(errs, axis=0), 100 * float(np.mean(rates))


def improved(s: Stream, orders: list[np.ndarray], d: int, marks: str, dim_ok: str) -> None:
    """Large label batches, larger steps and iterate averaging (the streaming defaults)."""
    p = OnlineParams(dim=d)  # defaults: labels 250, R = 100, eta0 = 10, p = 0.09, averaged
    rule, noise = p.rule(), p.noise()
    print(f"\nLarge batches with iterate averaging (the `OnlineParams` defaults: exponential "
          f"rule p = {p.p}, bound R*M = {p.radius_w * p.radius_x:g}, true eps_s = "
          f"{rule.epsilon():.4f}; eta0 = {p.eta0:g}, lambda = {p.lam:g}; charge "
          f"{p.epoch_cost()}):\n")
    print(f"| learner | batching | queried % | {marks} | end of stream |\n{dim_ok}")
    base = p.learner()
    plain = OnlineConfig(**{**base.__dict__, "batch": 1, "average": False})
    err, rate = run(s, orders, plain, None, None)
    print(f"| non-private online, labels all, R = 100, eta0 = 10 | 1 | {rate:.1f} | {fmt(err)} |")
    for b, avg in ((250, True), (250, False), (125, True), (100, True), (500, True)):
        cfg = OnlineConfig(**{**base.__dict__, "batch": b, "average": avg})
        err, rate = run(s, orders, cfg, rule, noise)
        what = "averaged" if avg else "last iterate"
        print(f"| private eps 1+1, {what} | labels {b} | {rate:.1f} | {fmt(err)} |")
    print("\nEpsilon sweep with these settings (eps_s = eps_g = eps, labels 250, averaged):\n")
    print(f"| eps_s = eps_g | queried % | {marks} | end of stream |\n{dim_ok[4:]}")
    for eps in ("0.25", "0.5", "1", "2", "4"):
        q = OnlineParams(dim=d, epsilon_select=eps, epsilon_gradient=eps)
        err, rate = run(s, orders, q.learner(), q.rule(), q.noise())
        print(f"| {eps} | {rate:.1f} | {fmt(err)} |")


def fmt(row: np.ndarray) -> str:
    return " | ".join(f"{v:.1f}" for v in row)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=10)
    ap.add_argument("--datasets", nargs="*", default=["digits", "mnist", "http"])
    args = ap.parse_args()
    marks = " | ".join(f"{m} labels" for m in CHECKPOINTS)
    dim_ok = "|---" * (len(CHECKPOINTS) + 4) + "|"
    start = time.process_time()
    for name in args.datasets:
        s = load(name)
        if s is None:
            print(f"\n{name}: not found under {DATA}, skipped")
            continue
        d = s.X.shape[1]
        rng = np.random.default_rng(2)  # stream orders only
        orders = [rng.permutation(len(s.y)) for _ in range(args.orders)]
        batch_err = 100 * np.mean(LinearSVC().fit(s.X, s.y).predict(s.Xt) != s.yt)
        print(
            f"\n### {s.name} (d = {d} with bias; {len(s.y)} stream records, "
            f"{len(s.yt)} test; {s.note})\n"
        )
        print(f"Batch LinearSVC on all {len(s.y)} labelled records: test error {batch_err:.1f} %.")
        rule = ExponentialRule.for_epsilon(P_QUERY, RADIUS_W, 1.0)
        noise = make_gradient_noise(1.0, 1.0, DELTA)
        cost = record_cost(rule, noise)
        print(
            f"Private: exponential rule p = {rule.p}, b = {rule.b:.4f}, bound R*M = "
            f"{rule.bound:g} (true eps_s = {rule.epsilon():.4f}); Gaussian scale "
            f"{noise.scale:.3f} for sensitivity 2M = 2 (eps_g = 1, delta_g = {DELTA:g}); "
            f"charge per record = per stream = ({cost.epsilon.normalize()}, "
            f"{cost.delta.normalize()}).\n"
        )
        print(f"| learner | batching | queried % | {marks} | end of stream |\n{dim_ok}")
        plain = OnlineConfig(dim=d, radius_w=RADIUS_W, lam=LAM, eta0=ETA0, batch=1)
        err, rate = run(s, orders, plain, None, None)
        print(f"| non-private online, labels all | 1 | {rate:.1f} | {fmt(err)} |")
        big = OnlineConfig(dim=d, radius_w=1000.0, lam=1e-4, eta0=100.0, batch=1)
        err, rate = run(s, orders, big, None, None)
        print(f"| same, R = 1000, eta0 = 100, lambda = 1e-4 | 1 | {rate:.1f} | {fmt(err)} |")
        err, rate = run(s, orders, plain, rule, None)
        print(f"| non-private online, private query rule | 1 | {rate:.1f} | {fmt(err)} |")
        for scheme, sizes in (("records", (5,)), ("labels", (1, 2, 5, 10, 20))):
            for b in sizes:
                cfg = OnlineConfig(
                    dim=d, radius_w=RADIUS_W, lam=LAM, eta0=ETA0, batch=b, scheme=scheme
                )  # type: ignore[arg-type]
                err, rate = run(s, orders, cfg, rule, noise)
                print(f"| private eps 1+1 | {scheme} {b} | {rate:.1f} | {fmt(err)} |")
        improved(s, orders, d, marks, dim_ok)
        print("\nEpsilon sweep (eps_s = eps_g = eps, labels batch 10):\n")
        print(f"| eps_s = eps_g | queried % | {marks} | end of stream |\n{dim_ok[4:]}")
        for eps in (0.25, 0.5, 1.0, 2.0, 4.0):
            cfg = OnlineConfig(dim=d, radius_w=RADIUS_W, lam=LAM, eta0=ETA0, batch=10)
            err, rate = run(
                s,
                orders,
                cfg,
                ExponentialRule.for_epsilon(P_QUERY, RADIUS_W, eps),
                make_gradient_noise(1.0, eps, DELTA),
            )
            print(f"| {eps:g} | {rate:.1f} | {fmt(err)} |")
    print(
        f"\nCPU time: {time.process_time() - start:.0f} s; {args.orders} stream orders; "
        "errors in %, mean over orders; a learner that never reaches a label count shows "
        "its end-of-stream error there."
    )


if __name__ == "__main__":
    main()
