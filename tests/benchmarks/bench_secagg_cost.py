"""Benchmark: what secure aggregation costs one participant per release, beside today's
independent release, in the same run.

Run: ``.venv/bin/python tests/benchmarks/bench_secagg_cost.py [--tables 100] [--cohort 20]
[--max-records 1000000]`` (``--max-records``: the study's declared public per-cell bound, which
sets the word size k).

A cohort of n participants (m LSH tables, sample size 16, epsilon 0.1, D = 2, T = 2) runs one
round in process with the real protocol code (``common.secagg``) and the real noise sampler
(``common.noise``); no network, so the figures are the protocol's own. Printed:

- participant CPU per release (``time.process_time``): noise share + advert + roster check +
  masking + unmask answer, against the independent release (OpenDP discrete Laplace + encoding);
  target < 1 s for m = 100, n = 20;
- bytes per participant: request bodies sent (binary frames, ``common.secagg.wire``) and
  the minimal responses read (one round-state read per phase: roster, then the unmask request,
  the roster left out because the member holds it), against the independent release body
  (the JSON a participant POSTs today); target within 1.2x;
- round trips per release (HTTP requests of the protocol, without polling);
- what a survivor adds only when members are lost after masking (recover phase: the recover
  state with the shares sealed for it, and its shares answer), for two members lost.
"""

from __future__ import annotations

import argparse
import sys
import time
from decimal import Decimal
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from common.config import FeatureSpec, PrivacyParams, new_study_config  # noqa: E402
from common.encoding import encode_release  # noqa: E402
from common.noise import sample_noise_share  # noqa: E402
from common.release import release_lsh_counts  # noqa: E402
from common.schemas import ContributionCreate  # noqa: E402
from common.secagg import participant as p  # noqa: E402
from common.secagg import server as s  # noqa: E402
from common.secagg.messages import RoundRef, b64e  # noqa: E402
from common.secagg.params import AggregationParams  # noqa: E402
from common.secagg.schemas import RoundState  # noqa: E402

EPS = Decimal("0.1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, default=100)
    ap.add_argument("--cohort", type=int, default=20)
    ap.add_argument("--features", type=int, default=10)
    ap.add_argument("--max-records", type=int, default=AggregationParams().max_records)
    ap.add_argument("--sample-size", type=int, default=16,
                    help="LSH sample size s (table sizes follow it; 16 is the default here)")
    args = ap.parse_args()
    n, m = args.cohort, args.tables
    params = AggregationParams(mode="secure", cohort_size=n, max_dropouts=2, max_colluders=2,
                               max_records=args.max_records)
    features = [FeatureSpec(name=f"x{i}", lo=0.0, hi=1.0) for i in range(args.features)]
    config = new_study_config("bench", features, privacy=PrivacyParams(epsilon_lsh=EPS),
                              n_tables=m, sample_size=args.sample_size, aggregation=params)
    cells, k = config.lsh_cells, config.secure_modulus_bits()
    rng = np.random.default_rng(0)
    counts = {f"h{i:02d}": rng.integers(0, 200, cells) for i in range(n)}
    coordinator = Ed25519PrivateKey.generate()
    ref = RoundRef(study_id="bench", round=1, attempt=1)
    ids = {name: Ed25519PrivateKey.generate() for name in counts}
    secrets = {name: p.RoundSecrets.generate() for name in counts}

    # independent release (today): OpenDP noise + encoding, the whole body
    t0 = time.process_time()
    release = release_lsh_counts(counts["h00"], m, EPS)
    body = ContributionCreate(idempotency_key="k" * 32, config_version=1, config_digest="a" * 64,
                              epsilon=EPS, delta=Decimal(0), lsh=encode_release(release),
                              grid=None).model_dump_json().encode()
    independent_cpu = time.process_time() - t0

    adverts = {name: p.make_advert(ref, name, ids[name], secrets[name]) for name in counts}
    roster_msg = s.build_roster(ref, {n: (ids[n].public_key(), a) for n, a in adverts.items()},
                                config_digest="c" * 64,
                                modulus_bits=k, threshold=params.threshold, key=coordinator)
    noisy = {}
    uploads = {}
    me = "h00"
    cpu = {}
    for name in counts:
        t0 = time.process_time()
        noisy[name] = counts[name] + sample_noise_share(cells, m, EPS, params.h_min)
        t1 = time.process_time()
        p.make_advert(ref, name, ids[name], secrets[name])
        roster = p.check_roster(roster_msg, me=name, my_advert=adverts[name],
                                coordinator_key=coordinator.public_key(), ref=ref, params=params,
                                config_digest="c" * 64, modulus_bits=k)
        uploads[name] = p.mask_upload(roster, me=name, identity=ids[name],
                                      secrets=secrets[name], noisy=noisy[name])
        if name == me:
            cpu = {"noise": t1 - t0, "keys+roster+mask": time.process_time() - t1}
    sroster = s.roster_of(roster_msg, coordinator.public_key())
    accepted = {name: s.accept_masked(up, sroster, name=name,
                                      identity=ids[name].public_key(), n_cells=cells)
                for name, up in uploads.items()}
    request = s.build_request(sroster, list(counts), coordinator, uploads)
    t0 = time.process_time()
    answer = p.answer_unmask(request, p.check_roster(
        roster_msg, me=me, my_advert=adverts[me], coordinator_key=coordinator.public_key(),
        ref=ref, params=params, config_digest="c" * 64, modulus_bits=k),
        me=me, identity=ids[me], secrets=secrets[me],
        coordinator_key=coordinator.public_key(), params=params, unmasked_attempt=None,
        record=lambda a: None)
    cpu["unmask"] = time.process_time() - t0
    answers = {me: s.accept_unmask(answer, sroster, name=me, identity=ids[me].public_key())}
    t0 = time.process_time()
    for name in counts:  # the others answer too (coordinator side, for the check below)
        if name != me:
            rs = p.check_roster(roster_msg, me=name, my_advert=adverts[name],
                                coordinator_key=coordinator.public_key(), ref=ref,
                                params=params, config_digest="c" * 64, modulus_bits=k)
            ans = p.answer_unmask(request, rs, me=name, identity=ids[name],
                                  secrets=secrets[name],
                                  coordinator_key=coordinator.public_key(), params=params,
                                  unmasked_attempt=None, record=lambda a: None)
            answers[name] = s.accept_unmask(ans, sroster, name=name,
                                            identity=ids[name].public_key())
    total = s.reveal_sum(sroster, accepted, answers)
    coordinator_cpu = time.process_time() - t0
    assert np.array_equal(total, sum(noisy.values())), "masks did not cancel"

    # recover phase (only when members are lost after masking): two lost, me a survivor
    lost = [n_ for n_ in counts if n_ != me][-2:]
    recover = s.build_recover(sroster, lost, coordinator)
    inbox = {o: b64e(s.sealed_share(uploads[o], sroster, owner=o, holder=me, n_cells=cells))
             for o in lost}
    mine = p.answer_recover(recover, sroster, me=me, identity=ids[me], secrets=secrets[me],
                            inbox=inbox, coordinator_key=coordinator.public_key(),
                            unmasked_attempt=1)
    s.accept_shares(mine, sroster, name=me, identity=ids[me].public_key(), missing=lost)

    base = dict(study_id="bench", round=1, attempt=1, status="masking", expected=list(counts),
                cohort=n, masked=0, survivors=0, created_at="2026-01-01T00:00:00Z",
                finished_at=None)
    state_roster = RoundState(**base, roster=roster_msg, done=["advert"]).model_dump_json()
    state_unmask = RoundState(**{**base, "status": "unmask"}, roster=None,  # already held
                              roster_digest=roster_msg.digest(), request=request,
                              done=["advert", "masked"]).model_dump_json()
    state_recover = RoundState(**{**base, "status": "recover"}, roster=None,
                               roster_digest=roster_msg.digest(), request=recover, inbox=inbox,
                               done=["advert", "masked", "unmask"]).model_dump_json()
    recover_bytes = (len(state_recover), len(mine.model_dump_json()))
    sent = [adverts[me], uploads[me], answer]
    up_bytes = sum(len(x) for x in sent)
    down_bytes = len(state_roster.encode()) + len(state_unmask.encode())
    secure_cpu = sum(cpu.values())

    print(f"# Secure aggregation cost per participant (m = {m}, n = {n}, D = 2, T = 2, "
          f"h_min = {params.h_min}, epsilon {EPS}, {cells} cells, max_records "
          f"{params.max_records}, k = {k} bits)\n")
    print("| measure | independent (today) | secure aggregation | ratio |")
    print("|---|---|---|---|")
    print(f"| participant CPU per release | {independent_cpu * 1000:.1f} ms | "
          f"{secure_cpu * 1000:.1f} ms (noise share {cpu['noise'] * 1000:.1f}, keys + roster "
          f"check + masking {cpu['keys+roster+mask'] * 1000:.1f}, unmask "
          f"{cpu['unmask'] * 1000:.1f}) | {secure_cpu / independent_cpu:.1f}x |")
    print(f"| bytes sent | {len(body)} | {up_bytes} (advert {len(sent[0])}, masked "
          f"{len(sent[1])}, unmask {len(sent[2])}) | {up_bytes / len(body):.2f}x |")
    print(f"| bytes sent + round messages read | {len(body)} | {up_bytes + down_bytes} "
          f"(roster state {len(state_roster)}, unmask state {len(state_unmask)}) | "
          f"{(up_bytes + down_bytes) / len(body):.2f}x |")
    print("| round trips per release | 1 (POST contribution) | 5 (POST keys, GET roster, "
          "POST masked, GET request, POST unmask) | 5x |")
    print(f"\nonly when members are lost after masking (recover phase; 2 lost): each survivor "
          f"also reads {recover_bytes[0]} bytes (recover state with the shares sealed for it) "
          f"and sends {recover_bytes[1]} (its shares of the lost members' seeds), 2 more round "
          "trips")
    print(f"\ncoordinator CPU to check {n} answers and reveal the sum: "
          f"{coordinator_cpu * 1000:.0f} ms; target participant CPU < 1 s: "
          f"{'met' if secure_cpu < 1 else 'NOT met'}; bytes sent within 1.2x: "
          f"{'met' if up_bytes <= 1.2 * len(body) else 'NOT met'}")


if __name__ == "__main__":
    main()
