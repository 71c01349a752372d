# How to run: Flower is not a fedod dependency. Install it into any scratch venv and run this
# file with that venv's python, without the repository on the path (it imports nothing from it):
#
#     python3 -m venv /tmp/flwr-venv && /tmp/flwr-venv/bin/pip install flwr numpy
#     env -u PYTHONPATH nice -n 10 /tmp/flwr-venv/bin/python \
#         tests/benchmarks/bench_secagg_flower.py [--cohorts 100 1000]
"""Benchmark: Flower's SecAgg+ primitives, in process, on the vectors of bench_secagg_cost.py.

For each n the round is run with Flower's own functions (``flwr.common.secure_aggregation``
and ``flwr.supercore.primitives.asymmetric``), called in the order of Flower's client mod
(``flwr/client/mod/secure_aggregation/secaggplus_mod.py``: ``_setup``, ``_share_keys``,
``_collect_masked_vectors``, ``_unmask``) and server workflow
(``flwr/server/workflow/secure_aggregation/secaggplus_workflow.py``: the ring of neighbours
of ``setup_stage``, the sum of ``collect_masked_vectors_stage`` and ``unmask_stage``); no
primitive is re-implemented, only the message passing (Flower's ``Message``/``Grid`` layer,
protobuf and gRPC) is replaced by Python dicts. Same parameters as our benchmark, from
``common.secagg.params`` at m = 100 tables (hard-coded here so the script needs no fedod
install): 1,056 integer cells, n = 100 with degree k = 6, Shamir threshold t = 1 and 28-bit
words; n = 1,000 with k = 14, t = 2 and 31-bit words (Flower's ``modulus_range`` = 2^bits).
Every member runs the whole protocol; 5 % of them (at least 1) are lost after sharing their
keys and before masking (so the server must rebuild their pairwise masks from their
neighbours' shares of ``sk1``), and the revealed sum is checked against the sum of the
survivors' vectors modulo 2^bits.

Counted (``time.process_time``, which includes the threads Flower's ``create_shares`` and
``combine_shares`` start):

- member CPU, for one measured member (a survivor that is a neighbour of a lost member, as in
  ours): 2 SECP384R1 key pairs + PEM serialisation; ``os.urandom`` self-mask seed; Shamir
  shares of the seed and of the PEM ``sk1`` (``create_shares``, k + 1 shares: Flower's ring
  holds the owner too); k ECDH + HKDF keys (``generate_shared_key`` with ``sk2``) and k
  Fernet encryptions of ``share_keys_plaintext_concat``; decrypting the k shares it receives;
  the self mask and k pairwise masks (``generate_shared_key`` with ``sk1`` +
  ``pseudo_rand_gen``), masking and ``parameters_mod``; the unmask answer (share lookup).
- server unmask CPU per round: for every survivor, ``combine_shares`` of its seed from its
  surviving neighbours' shares and its self mask removed; for every lost member,
  ``combine_shares`` of its ``sk1`` and its k pairwise masks rebuilt (ECDH + ``pseudo_rand_gen``)
  and removed; ``parameters_mod``. The sum of the n - lost masked vectors (the collect stage) is
  printed apart.
- bytes: what the measured member sends (its 2 PEM public keys, k share ciphertexts, its
  masked vector as ``ndarray_to_bytes``, its unmask shares) and reads (k neighbours' 2 PEM
  keys, k ciphertexts for it). Flower's message framing (protobuf records) is not counted.

Not counted: Flower's quantisation (``quantize`` of float parameters and the weight factor of
``factor_combine``: our vectors are integers already, so the integer vector is masked as is);
the server's ``setup_stage`` ring and share forwarding; the public-key uniqueness checks;
transport. Flower has no signatures, roster, beacon or draw checks in SecAgg+, so none of
ours' authentication work has a counterpart here.

Flower's masks: ``pseudo_rand_gen(seed, num_range, shapes)`` XOR-folds the seed, 4 bytes at a
time (little endian), into one 32-bit integer, seeds numpy's legacy ``np.random.RandomState``
(MT19937) with it and draws ``randint(0, num_range - 1, shape, dtype=int64)``, i.e. words in
[0, num_range - 2]. The pairwise seed is the 44-byte urlsafe base64 text of a 32-byte
HKDF-SHA256 of the P-384 ECDH secret; the self-mask seed is 32 bytes of ``os.urandom``. So
whatever the key size, each mask comes from one of at most 2^32 MT19937 streams.

Where the server's time goes: ``unmask_stage`` hands ``combine_shares`` every share it
collected (up to k + 1), not t of them, and pycryptodome's ``Shamir.combine`` interpolates in
pure Python over GF(2^128), once per 16-byte chunk: 3 chunks for the padded 32-byte seed, 20
for the padded 306-byte PEM ``sk1``. On the 2-core box that is about 10 ms per seed at k + 1 = 7
and 34 ms at 15 (1-2 ms with only t shares), 60 / 210 ms per ``sk1``. Flower's neighbours are a
ring over a shuffled order (k / 2 on either side), not our random k-regular graph; the degree
and threshold are ours, passed to Flower's functions.
"""

from __future__ import annotations

import argparse
import os
import random
import time

import numpy as np

CELLS = 1056  # config.lsh_cells at m = 100 tables
PARAMS = {100: (6, 1, 28), 1000: (14, 2, 31)}  # n -> (degree k, threshold t, word bits)


def _flwr():  # imported here: Flower is only in the scratch venv
    import flwr
    from flwr.common import ndarray_to_bytes
    from flwr.common.secure_aggregation.crypto import shamir, symmetric_encryption
    from flwr.common.secure_aggregation.ndarrays_arithmetic import (
        parameters_addition,
        parameters_mod,
        parameters_subtraction,
    )
    from flwr.common.secure_aggregation.secaggplus_utils import (
        pseudo_rand_gen,
        share_keys_plaintext_concat,
        share_keys_plaintext_separate,
    )
    from flwr.supercore.primitives import asymmetric

    return dict(version=flwr.__version__, to_bytes=ndarray_to_bytes, shamir=shamir,
                sym=symmetric_encryption, add=parameters_addition, sub=parameters_subtraction,
                mod=parameters_mod, prg=pseudo_rand_gen, concat=share_keys_plaintext_concat,
                separate=share_keys_plaintext_separate, asym=asymmetric)


F = _flwr()


def _ring(ids: list[int], k: int, rng: random.Random) -> dict[int, list[int]]:
    """Flower's setup_stage: shuffle, then each node and the k/2 on either side (k + 1)."""
    order = ids[:]
    rng.shuffle(order)
    half = (k + 1) >> 1
    return {nid: [order[(i + o) % len(order)] for o in range(-half, half + 1)]
            for i, nid in enumerate(order)}


def _setup() -> dict:
    a = F["asym"]
    sk1, pk1 = a.generate_key_pairs()
    sk2, pk2 = a.generate_key_pairs()
    return dict(sk1=a.private_key_to_bytes(sk1), pk1=a.public_key_to_bytes(pk1),
                sk2=a.private_key_to_bytes(sk2), pk2=a.public_key_to_bytes(pk2))


def _share_keys(nid: int, st: dict, ring: list[int], keys: dict[int, dict], t: int) -> dict:
    a, sym = F["asym"], F["sym"]
    st["rd_seed"] = os.urandom(32)
    b_shares = F["shamir"].create_shares(st["rd_seed"], t, len(ring))
    sk1_shares = F["shamir"].create_shares(st["sk1"], t, len(ring))
    st["b"], st["s"], st["ss2"], out = {}, {}, {}, {}
    for idx, other in enumerate(ring):
        if other == nid:
            st["b"][nid], st["s"][nid] = b_shares[idx], sk1_shares[idx]
            continue
        key = sym.generate_shared_key(a.bytes_to_private_key(st["sk2"]),
                                      a.bytes_to_public_key(keys[other]["pk2"]))
        st["ss2"][other] = key
        out[other] = sym.encrypt(key, F["concat"](nid, other, b_shares[idx], sk1_shares[idx]))
    return out


def _mask(nid: int, st: dict, inbox: dict[int, bytes], keys: dict[int, dict], vector: np.ndarray,
          bits: int) -> list[np.ndarray]:
    a, sym = F["asym"], F["sym"]
    for src, ct in inbox.items():
        actual, dst, b_share, sk1_share = F["separate"](sym.decrypt(st["ss2"][src], ct))
        assert (actual, dst) == (src, nid)
        st["b"][src], st["s"][src] = b_share, sk1_share
    shapes = [vector.shape]
    masked = F["add"]([vector], F["prg"](st["rd_seed"], 1 << bits, shapes))
    for other in inbox:
        key = sym.generate_shared_key(a.bytes_to_private_key(st["sk1"]),
                                      a.bytes_to_public_key(keys[other]["pk1"]))
        pair = F["prg"](key, 1 << bits, shapes)
        masked = F["add"](masked, pair) if nid > other else F["sub"](masked, pair)
    return F["mod"](masked, 1 << bits)


def _unmask_answer(st: dict, active: list[int], dead: list[int]) -> tuple[list[int], list[bytes]]:
    return active + dead, [st["b"][x] for x in active] + [st["s"][x] for x in dead]


def run(n: int, drop: float) -> dict[str, float]:
    k, t, bits = PARAMS[n]
    rng, nrng = random.Random(n), np.random.default_rng(n)
    ids = list(range(1, n + 1))
    ring = _ring(ids, k, rng)
    lost = set(rng.sample(ids, max(1, round(drop * n))))
    first = min(lost)
    me = next(x for x in ring[first] if x not in lost)
    vectors = {x: nrng.integers(0, 1 << 10, CELLS, dtype=np.int64) for x in ids}
    cpu: dict[str, float] = {}

    states: dict[int, dict] = {}
    for x in ids:  # stage 0: setup
        t0 = time.process_time()
        states[x] = _setup()
        if x == me:
            cpu["setup"] = time.process_time() - t0
    keys = {x: {"pk1": st["pk1"], "pk2": st["pk2"]} for x, st in states.items()}
    outboxes = {}
    for x in ids:  # stage 1: share keys
        t0 = time.process_time()
        outboxes[x] = _share_keys(x, states[x], ring[x], keys, t)
        if x == me:
            cpu["share"] = time.process_time() - t0
    inboxes: dict[int, dict[int, bytes]] = {x: {} for x in ids}
    for src, out in outboxes.items():
        for dst, ct in out.items():
            inboxes[dst][src] = ct
    survivors = [x for x in ids if x not in lost]
    masked = {}
    for x in survivors:  # stage 2: collect masked vectors (the lost never send theirs)
        t0 = time.process_time()
        masked[x] = _mask(x, states[x], inboxes[x], keys, vectors[x], bits)
        if x == me:
            cpu["mask"] = time.process_time() - t0
    t0 = time.process_time()  # server: the sum of the collect stage
    total = masked[survivors[0]]
    for x in survivors[1:]:
        total = F["add"](total, masked[x])
    total = F["mod"](total, 1 << bits)
    cpu["sum"] = time.process_time() - t0
    answers = {}
    for x in survivors:  # stage 3: each survivor answers for its ring
        t0 = time.process_time()
        answers[x] = _unmask_answer(states[x], [y for y in ring[x] if y not in lost],
                                    [y for y in ring[x] if y in lost])
        if x == me:
            cpu["answer"] = time.process_time() - t0

    t0 = time.process_time()  # server: unmask_stage
    collected: dict[int, list[bytes]] = {x: [] for x in ids}
    for nids, shares in answers.values():
        for owner, share in zip(nids, shares, strict=True):
            collected[owner].append(share)
    a, sym = F["asym"], F["sym"]
    shapes = [(CELLS,)]
    for nid, share_list in collected.items():
        assert len(share_list) >= t
        secret = F["shamir"].combine_shares(share_list)
        if nid not in lost:
            total = F["sub"](total, F["prg"](secret, 1 << bits, shapes))
            continue
        for other in ring[nid]:
            if other == nid:
                continue
            key = sym.generate_shared_key(a.bytes_to_private_key(secret),
                                          a.bytes_to_public_key(keys[other]["pk1"]))
            pair = F["prg"](key, 1 << bits, shapes)
            total = F["add"](total, pair) if nid > other else F["sub"](total, pair)
    total = F["mod"](total, 1 << bits)
    cpu["unmask"] = time.process_time() - t0
    expect = sum(vectors[x] for x in survivors) % (1 << bits)
    assert np.array_equal(total[0], expect), "Flower round did not reveal the survivors' sum"

    st = states[me]
    sent = dict(keys=len(st["pk1"]) + len(st["pk2"]),
                shares=sum(len(c) for c in outboxes[me].values()),
                masked=sum(len(F["to_bytes"](w)) for w in masked[me]),
                answer=sum(len(s) for s in answers[me][1]) + 8 * len(answers[me][0]))
    read = dict(keys=sum(len(keys[y]["pk1"]) + len(keys[y]["pk2"]) for y in ring[me] if y != me),
                shares=sum(len(c) for c in inboxes[me].values()))
    member = cpu["setup"] + cpu["share"] + cpu["mask"] + cpu["answer"]
    return dict(n=n, k=k, t=t, bits=bits, lost=len(lost), cpu=cpu, member=member, sent=sent,
                read=read, ct=len(next(iter(outboxes[me].values()))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cohorts", type=int, nargs="+", default=[100, 1000], choices=list(PARAMS))
    ap.add_argument("--dropouts", type=float, default=0.05)
    args = ap.parse_args()
    print(f"# Flower SecAgg+ primitives in process (flwr {F['version']}, numpy "
          f"{np.__version__}; {CELLS} int cells, {args.dropouts:.0%} of the members lost "
          "after sharing keys, before masking)\n")
    print("| n | k (Flower ring k + 1), t, bits | Flower member CPU (setup / share / mask / "
          "answer) | Flower server unmask CPU (+ sum of masked vectors) | member sends "
          "(keys + share ciphertexts + masked vector + unmask shares) | member reads "
          "(neighbours' keys + share ciphertexts) |")
    print("|---|---|---|---|---|---|")
    for n in args.cohorts:
        r = run(n, args.dropouts)
        c, s, rd = r["cpu"], r["sent"], r["read"]
        print(f"| {n:,} ({r['lost']} lost) | {r['k']} ({r['k'] + 1}), t = {r['t']}, "
              f"{r['bits']} bits | {r['member'] * 1000:.1f} ms ({c['setup'] * 1000:.1f} / "
              f"{c['share'] * 1000:.1f} / {c['mask'] * 1000:.1f} / {c['answer'] * 1000:.2f}) | "
              f"{c['unmask'] * 1000:.0f} ms (+ {c['sum'] * 1000:.0f} ms) | "
              f"{sum(s.values()):,} B ({s['keys']} + {s['shares']:,} + {s['masked']:,} + "
              f"{s['answer']:,}) | {sum(rd.values()):,} B ({rd['keys']:,} + {rd['shares']:,}) |",
              flush=True)
    print(f"\nshare ciphertext: {r['ct']} B (Fernet of 20 B header + seed share + PEM sk1 share); "
          "the revealed sum equals the survivors' sum in every run.")


if __name__ == "__main__":
    main()
