"""A real ``fedod-coordinator serve`` with 4 workers on PostgreSQL under concurrent load.

Invariants after the storm (and after a SIGKILL in the middle of one): the global sums equal
the exact sum of each participant's latest stored contribution (a participant counts once),
the stored contributions include every acknowledged one, each replaces exactly its
participant's previous one; every ledger equals the sum of its charges (every release is
charged); no cap is exceeded; charges and contributions match one to one. Model reads run
during the storm, so the fold of the sums races the ingest it folds.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from storm_kit import CAP, N_PARTICIPANTS, check_invariants, setup_federation

from common.budget import PrivacyBudget

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

RELEASES_EACH = 12  # 2 of them over budget
KILL_AFTER = 10  # acknowledged answers before the SIGKILL


def test_concurrent_contributions_stay_exact(coordinator_server, fresh_postgres_url, coord_kit):
    server = coordinator_server(fresh_postgres_url, workers=4)
    signed, tokens = setup_federation(server, coord_kit)
    rng = np.random.default_rng(1)
    jobs = []
    for name, token in tokens.items():
        for _ in range(RELEASES_EACH):
            body, lsh, _ = coord_kit.release(signed, rng)
            jobs.append((name, token, body, lsh))
    duplicates = [jobs[i] for i in rng.choice(len(jobs), size=40, replace=False)]
    readers = list(tokens.items())[:5]
    reads = [(name, token, None, None) for name, token in readers for _ in range(8)]
    order = jobs + duplicates + reads
    rng.shuffle(order)
    results = []
    lock = threading.Lock()
    client = httpx.Client(base_url=server.url, timeout=60,
                          limits=httpx.Limits(max_connections=32))

    def send(job):
        name, token, body, lsh = job
        headers = {"Authorization": f"Bearer {token}"}
        while True:  # a busy pool answers 503 + Retry-After: retry the same bytes, as clients do
            if body is None:  # a model read: folds whatever is stored so far
                r = client.get("/v1/studies/storm/model", headers=headers)
            else:
                r = client.post("/v1/studies/storm/contributions", json=body, headers=headers)
            if r.status_code != 503:
                break
            time.sleep(float(r.headers["retry-after"]))
        if body is None:
            assert r.status_code == 200 and r.json()["version"] >= 0, r.text
            return
        with lock:
            results.append((name, body["idempotency_key"], r.status_code, r.json(), lsh))

    start = time.perf_counter()
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(send, order))
    elapsed = time.perf_counter() - start
    client.close()
    assert len(results) == len(order) - len(reads) >= 200
    statuses = [s for _, _, s, _, _ in results]
    assert set(statuses) <= {200, 201, 409}, set(statuses)
    # accepted: final answer 201 or 200 (after a 503 past the deadline, the retry may replay)
    accepted = {key: (name, lsh) for name, key, s, _, lsh in results if s in (200, 201)}
    ids = {}
    for _, key, s, body, _ in results:
        if s in (200, 201):
            assert ids.setdefault(key, body["id"]) == body["id"], "a replay got another answer"
    per_participant = {name: 0 for name in tokens}
    for name, _ in accepted.values():
        per_participant[name] += 1
    assert all(n == 10 for n in per_participant.values()), per_participant
    budget_409 = [b for _, _, s, b, _ in results if s == 409 and "budget" in b["detail"]]
    assert len(budget_409) >= N_PARTICIPANTS * 2 - 40  # some over-budget attempts were replays
    check_invariants(server, fresh_postgres_url, {k: lsh for k, (_, lsh) in accepted.items()})
    cap = PrivacyBudget(CAP)
    budgets = httpx.get(f"{server.url}/v1/admin/budget", timeout=60,
                        headers={"Authorization": f"Bearer {server.admin_token}"}).json()
    for b in budgets:
        spent = sum(PrivacyBudget(e["epsilon"]).epsilon for e in b["entries"])
        assert PrivacyBudget(b["epsilon_spent"]).epsilon == spent <= cap.epsilon
    print(f"\n{len(order)} requests in {elapsed:.2f}s ({len(order) / elapsed:.0f}/s)")


def test_sigkill_mid_stream_leaves_no_half_writes(coordinator_server, fresh_postgres_url,
                                                  coord_kit):
    server = coordinator_server(fresh_postgres_url, workers=4)
    signed, tokens = setup_federation(server, coord_kit, n=8)
    rng = np.random.default_rng(2)
    jobs = [(t, *coord_kit.release(signed, rng)[:2]) for t in tokens.values() for _ in range(8)]
    acknowledged, unknown = {}, []
    lock = threading.Lock()
    killed = threading.Event()
    client = httpx.Client(base_url=server.url, timeout=60)

    def send(job):
        token, body, lsh = job
        try:
            while True:  # a busy pool's 503 is retried with the same bytes, as clients do
                r = client.post("/v1/studies/storm/contributions", json=body,
                                headers={"Authorization": f"Bearer {token}"})
                if r.status_code != 503 or killed.is_set():
                    break
                time.sleep(float(r.headers["retry-after"]))
            ok = r.status_code in (200, 201)
        except httpx.TransportError:
            ok = False
        with lock:
            (acknowledged.__setitem__(body["idempotency_key"], lsh) if ok
             else unknown.append(job))
            # the kill is triggered by observed progress (KILL_AFTER answers counted), never
            # by a timer: at least len(jobs) - KILL_AFTER - 16 requests are still unsent then
            if len(acknowledged) == KILL_AFTER and not killed.is_set():
                killed.set()
                server.kill()

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(send, jobs))
    client.close()
    assert killed.is_set() and len(unknown) >= len(jobs) - KILL_AFTER - 16, len(unknown)
    server.start()
    check_invariants(server, fresh_postgres_url, acknowledged)
    with httpx.Client(base_url=server.url, timeout=30) as c:
        for token, body, lsh in unknown:  # retry with the same idempotency key
            r = c.post("/v1/studies/storm/contributions", json=body,
                       headers={"Authorization": f"Bearer {token}"})
            assert r.status_code in (200, 201), r.text
            acknowledged[body["idempotency_key"]] = lsh
    stored = check_invariants(server, fresh_postgres_url, acknowledged)
    assert set(stored) == set(acknowledged)
