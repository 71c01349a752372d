"""Benchmark: what a secure-aggregation release costs, beside the independent release, in one
run, for cohorts of 100, 1,000 and 10,000 members (SecAgg+-style sparse masking graph).

Run: ``nice -n 10 .venv/bin/python tests/benchmarks/bench_secagg_cost.py [--cohorts 100 1000
10000] [--tables 100] [--dropouts 0.05] [--colluders 0.05]``.

Each cohort (m LSH tables, sample size 16, epsilon 0.1, D = T = 5 % of n) runs one round in
process with the real protocol code (``common.secagg``): adverts, the roster (a bitmap over
the certified members), every member's roster check and masked frame, the unmask request,
5 % of the members lost after masking (their seeds recovered from their graph neighbours'
shares) and the reveal, checked to equal the exact sum of the vectors. Where the graph can be
bad (n = 1,000 and 10,000 here) the roster carries the consortium's beacon signature
(common.secagg.beacon): every member verifies it in its roster check, and the states from
masking on carry it. n = 10,000 is beyond
the config's 1,000-member limit: its parameters are built without the config's validation
(in-process protocol only). The other members' vectors are random integers (their noise
would cost sampler time, not protocol time); the measured member draws its real noise share.

Printed per n, for one measured member (a survivor that is a graph neighbour of a lost member,
so it also answers the recover request):

- participant CPU per release (``time.process_time``): noise share + advert + roster check
  (graph, neighbours' adverts) + masking + unmask answer + recover answer, beside the
  independent release (OpenDP discrete Laplace + encoding); targets 30 / 60 / 100 ms;
- coordinator CPU to check the unmask answers and the shares answers and reveal the sum
  (roster re-read with every advert, then :func:`common.secagg.server.reveal_sum`); targets
  150 ms / 2 s / 30 s;
- bytes the member sends (its frames and shares answer) plus the round states it reads (the
  roster state with its neighbours' adverts, the unmask state with their acknowledgements,
  the recover state with the shares sealed for it), against the independent release body;
  targets 2x / 3x / 4x. The membership certificate (about 90 bytes per member) is read once
  per certificate version and kept (``known_membership``), so it is printed apart.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from decimal import Decimal
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from common.histograms.release import release_lsh_counts  # noqa: E402
from common.noise import sample_noise_share  # noqa: E402
from common.secagg import participant as p  # noqa: E402
from common.secagg import server as s  # noqa: E402
from common.secagg import view  # noqa: E402
from common.secagg.answers import answer_recover, answer_unmask  # noqa: E402
from common.secagg.beacon import sign_beacon, verify_beacon  # noqa: E402
from common.secagg.draws import sign_draw, verify_draw  # noqa: E402
from common.secagg.graph import graph_delta  # noqa: E402
from common.secagg.messages import RoundRef, b64d, b64e  # noqa: E402
from common.secagg.params import AggregationParams, modulus_bits  # noqa: E402
from common.secagg.schemas import BeaconDraw, RoundState  # noqa: E402
from common.secagg.wire import WIRE  # noqa: E402
from common.study.config import FeatureSpec, PrivacyParams, new_study_config  # noqa: E402
from common.wire.encoding import encode_release  # noqa: E402
from common.wire.schemas import ContributionCreate  # noqa: E402

EPS = Decimal("0.1")
TARGETS = {100: (30, 150, 2.0), 1000: (60, 2000, 3.0), 10_000: (100, 30_000, 4.0)}


def _params(n: int, d: int, t: int) -> AggregationParams:
    fields = dict(mode="secure", cohort_size=n, max_dropouts=d, max_colluders=t,
                  h_min=n - d - t)
    if n <= 1000:
        return AggregationParams(**fields)
    return AggregationParams.model_construct(**fields)  # in-process only: past the config cap


def _independent(m: int, cells: int) -> tuple[float, int]:
    counts = np.random.default_rng(0).integers(0, 200, cells)
    t0 = time.process_time()
    release = release_lsh_counts(counts, m, EPS)
    body = ContributionCreate(idempotency_key="k" * 32, config_version=1, config_digest="a" * 64,
                              epsilon=EPS, delta=Decimal(0), lsh=encode_release(release),
                              grid=None).model_dump_json().encode()
    return time.process_time() - t0, len(body)


def _state(n: int, me: str, status: str, **fields: object) -> int:
    """Bytes of a member's round state as the coordinator serves it: compact (defaults, the
    roster digest, the signed fields the member knows and, until the round is over, the
    counts left out: common.secagg.view, coordinator.services.secagg.views)."""
    base = dict(round=1, attempt=1, status=status, expected=[me], wire=WIRE)
    for signed in ("roster", "request"):
        if fields.get(signed) is not None:
            fields[signed] = view.compact(fields[signed])  # type: ignore[arg-type]
    state = RoundState(**base, **fields)  # type: ignore[arg-type]
    return len(state.model_dump_json(exclude_defaults=True))


def _bytes(me: str, n: int, signed, sroster, adverts, uploads, request, answers, beacon,
           draws, recover=None, inbox=None, shares=None) -> tuple[int, int]:
    """(sent, read) of ``me``: its frames, and one read of each round state it needs (in a
    beacon study the state with the roster carries the beacon signature and ``me``'s own draw
    statement; later states leave them out with the roster, which ``me`` holds)."""
    sent = len(adverts[me]) + len(uploads[me]) + len(answers[me])
    read = (_state(n, me, "masking", roster=signed, beacon=beacon, draw=draws.get(me),
                   adverts=s.neighbour_adverts(sroster, me, adverts), done=["advert"])
            + _state(n, me, "unmask", request=request,
                     acks=s.neighbour_acks(sroster, me, uploads), done=["advert", "masked"]))
    if shares is not None:
        sent += len(shares)
        read += _state(n, me, "recover", request=recover,
                       inbox=inbox, done=["advert", "masked", "unmask"])
    return sent, read


def run(n: int, m: int, drop: float, collude: float, cells: int) -> dict[str, float]:
    d, t = max(1, round(n * drop)), max(1, round(n * collude))
    params = _params(n, d, t)
    k = modulus_bits(params, m, EPS)  # the word size grows with n * max_records
    names = [f"h{i:05d}" for i in range(n)]
    rng = np.random.default_rng(n)
    ref = RoundRef(study_id="bench", round=1, attempt=1)
    coordinator = Ed25519PrivateKey.generate()
    ids = {x: Ed25519PrivateKey.generate() for x in names}
    identities = {x: b64e(p.raw_public(ids[x])) for x in names}
    secrets = {x: p.RoundSecrets.generate() for x in names}
    adverts = {x: p.make_advert(ref, x, ids[x], secrets[x]) for x in names}
    signed = s.build_roster(ref, adverts, universe=names, config_digest="c" * 64,
                            modulus_bits=k, threshold=params.threshold, degree=params.degree,
                            key=coordinator)
    sroster = s.roster_of(signed, coordinator.public_key(), adverts, identities)
    beacon, consortium, draws = None, Ed25519PrivateKey.generate(), {}
    if params.needs_beacon:  # the consortium's signature seeds the graph; one draw each
        beacon = sign_beacon(ref, signed.digest(), consortium)
        sroster = dataclasses.replace(sroster, beacon=b64d(beacon))
        draws = {x: BeaconDraw(count=1, signature=sign_draw(ref, signed.digest(), x, 1,
                                                            consortium)) for x in names}
    lost = sorted(rng.choice(names, size=max(1, round(0.05 * n)), replace=False).tolist())
    me = next(x for x in sroster.holders(lost[0]) if x not in lost)
    check = dict(coordinator_key=coordinator.public_key(), ref=ref, params=params,
                 config_digest="c" * 64, modulus_bits=k, identities=identities)
    vectors, uploads, rosters, cpu = {}, {}, {}, {}
    for x in names:
        t0 = time.process_time()
        if x == me:
            vectors[x] = rng.integers(0, 200, cells) + sample_noise_share(cells, m, EPS,
                                                                          params.h_min)
        else:
            vectors[x] = rng.integers(-1000, 1000, cells)
        t1 = time.process_time()
        p.make_advert(ref, x, ids[x], secrets[x])
        near = s.neighbour_adverts(sroster, x, adverts)
        raw = beacon and verify_beacon(beacon, ref, signed.digest(), consortium.public_key())
        if draws:  # its own draw statement, before it masks
            verify_draw(ref, signed.digest(), x, 1, draws[x].signature, consortium.public_key())
        rosters[x] = p.check_roster(signed, me=x, my_advert=adverts[x], adverts=near,
                                    beacon=raw or None, **check)
        uploads[x] = p.mask_upload(rosters[x], me=x, identity=ids[x], secrets=secrets[x],
                                   noisy=vectors[x])
        if x == me:
            cpu = {"noise": t1 - t0, "mask": time.process_time() - t1}
    words = {x: s.accept_masked(up, sroster, name=x, identity=ids[x].public_key(), n_cells=cells)
             for x, up in uploads.items()}
    request = s.build_request(sroster, n, coordinator)
    answers = {}
    for x in names:
        if x in lost:
            continue
        t0 = time.process_time()
        answers[x] = answer_unmask(
            request, rosters[x], me=x, identity=ids[x], secrets=secrets[x],
            acks=s.neighbour_acks(sroster, x, uploads), coordinator_key=coordinator.public_key(),
            params=params, unmasked_attempt=None, masked_attempt=1, record=lambda a: None)
        if x == me:
            cpu["unmask"] = time.process_time() - t0
    recover = s.build_recover(sroster, lost, coordinator)
    inboxes = {h: {o: b64e(s.sealed_share(uploads[o], sroster, owner=o, holder=h, n_cells=cells))
                   for o in s.helped(sroster, h, lost)}
               for h in s.helpers(sroster, set(answers), lost)}
    shares_msgs = {}
    for h, inbox in inboxes.items():
        t0 = time.process_time()
        shares_msgs[h] = answer_recover(
            recover, rosters[h], me=h, identity=ids[h], secrets=secrets[h], inbox=inbox,
            coordinator_key=coordinator.public_key(), unmasked_attempt=1, masked_attempt=1)
        if h == me:
            cpu["recover"] = time.process_time() - t0

    t0 = time.process_time()  # the coordinator: the beacon's draw statements, every answer,
    for x, drawn in draws.items():  # then the reveal
        verify_draw(ref, signed.digest(), x, drawn.count, drawn.signature,
                    consortium.public_key())
    again = dataclasses.replace(s.roster_of(signed, coordinator.public_key(), adverts,
                                            identities), beacon=sroster.beacon)
    commitments = {x: s.commitment_of(up, again, cells) for x, up in uploads.items()}
    seeds = {x: s.accept_unmask(a, again, name=x, identity=ids[x].public_key(),
                                commitment=commitments[x])
             for x, a in answers.items()}
    shares = {h: s.accept_shares(msg, again, name=h, identity=ids[h].public_key(), missing=lost)
              for h, msg in shares_msgs.items()}
    total = s.reveal_sum(again, words, seeds, shares, commitments)
    reveal = time.process_time() - t0
    assert np.array_equal(total, np.sum(list(vectors.values()), axis=0)), "masks did not cancel"

    common = (n, signed, sroster, adverts, uploads, request, answers, beacon, draws)
    mine = s.build_recover(sroster, s.helped(sroster, me, lost), coordinator)  # as served
    sent, read = _bytes(me, *common, mine, inboxes[me], shares_msgs[me])
    other = next(x for x in names if x not in lost and x not in inboxes)
    plain = sum(_bytes(other, *common))
    return {"plain": plain, "n": n, "k": k, "d": d, "t": t, "degree": again.graph.degree,
            "threshold": params.threshold,
            "bound": float(graph_delta(n, d, t)), "lost": len(lost),
            "cpu": sum(cpu.values()), "reveal": reveal, "sent": sent, "read": read,
            "cpu_parts": cpu, "certificate": 90 * n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cohorts", type=int, nargs="+", default=[100, 1000, 10_000])
    ap.add_argument("--tables", type=int, default=100)
    ap.add_argument("--dropouts", type=float, default=0.05)
    ap.add_argument("--colluders", type=float, default=0.05)
    args = ap.parse_args()
    m = args.tables
    features = [FeatureSpec(name=f"x{i}", lo=0.0, hi=1.0) for i in range(10)]
    config = new_study_config("bench", features, privacy=PrivacyParams(epsilon_lsh=EPS),
                              n_tables=m, sample_size=16,
                              aggregation=AggregationParams(mode="secure", cohort_size=1000,
                                                            max_dropouts=50, max_colluders=50))
    cells = config.lsh_cells
    ind_cpu, ind_bytes = _independent(m, cells)
    print(f"# Secure aggregation cost per release (m = {m}, {cells} cells, epsilon {EPS}, "
          f"word size k from n and max_records 10^6, D = {args.dropouts:.0%} and "
          f"T = {args.colluders:.0%} of n, "
          f"{args.dropouts:.0%} of the members lost after masking)\n")
    print(f"independent release (same run): participant CPU {ind_cpu * 1000:.1f} ms, "
          f"{ind_bytes} bytes sent\n")
    print("| n | degree k (t) | failure bound per graph (disconnected, or t in reach) | "
          "participant CPU "
          "(target) | coordinator check + reveal (target) | bytes sent + read vs independent "
          "(target): a member | a lost member's neighbour |")
    print("|---|---|---|---|---|---|---|")
    for n in args.cohorts:
        r = run(n, m, args.dropouts, args.colluders, cells)
        cpu_t, rev_t, bytes_t = TARGETS.get(n, (float("inf"),) * 3)
        ratio = (r["sent"] + r["read"]) / ind_bytes
        plain = r["plain"] / ind_bytes
        parts = ", ".join(f"{a} {b * 1000:.1f}" for a, b in r["cpu_parts"].items())
        print(f"| {n:,} (D = {r['d']}, T = {r['t']}, {r['lost']} lost, {r['k']} bits) | "
              f"{r['degree']} "
              f"({r['threshold']}) | {r['bound']:.1e} | {r['cpu'] * 1000:.1f} ms ({parts}) "
              f"(<= {cpu_t} ms: {'met' if r['cpu'] * 1000 <= cpu_t else 'NOT met'}) | "
              f"{r['reveal'] * 1000:,.0f} ms (<= {rev_t:,} ms: "
              f"{'met' if r['reveal'] * 1000 <= rev_t else 'NOT met'}) | {r['plain']} = "
              f"{plain:.2f}x ({'met' if plain <= bytes_t else 'NOT met'}) | {r['sent']} + "
              f"{r['read']} = {ratio:.2f}x (<= {bytes_t}x: "
              f"{'met' if ratio <= bytes_t else 'NOT met'}) |", flush=True)
    print("\nnot counted above: the membership certificate (about 90 bytes per member), read "
          "once per certificate version and kept; the round trips are those of before (POST "
          "keys, GET roster, POST masked, GET request, POST unmask; a neighbour of a lost "
          "member also GETs the recover request and POSTs its shares)")


if __name__ == "__main__":
    main()
