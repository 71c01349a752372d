"""Group commit across real server processes: 2 uvicorn workers, each with its own writer.

After N concurrent releases from several participants (some over budget), counts and ledgers
are exact; after a SIGKILL of the whole server once K answers were acknowledged (counted,
never timed), every acknowledged release is stored and charged after a restart, and nothing
is charged without its release. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
import sqlalchemy as sa

from coordinator.db.tables import Aggregate, Contribution, LedgerEntry, Participant

pytestmark = pytest.mark.slow

CAP = "3"  # six releases of 0.5 each


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def server_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'workers.db'}"
    return request.getfixturevalue("fresh_postgres_url")


def federation(server, coord_kit, n):
    admin = {"Authorization": f"Bearer {server.admin_token}"}
    with httpx.Client(base_url=server.url, headers=admin, timeout=60) as c:
        r = c.post("/v1/studies", json=coord_kit.study_spec("w"))
        assert r.status_code == 201, r.text
        signed, tokens = r.json()["config"], {}
        for i in range(n):
            r = c.post("/v1/participants", json={"name": f"h{i}", "epsilon_cap": CAP})
            tokens[f"h{i}"] = r.json()["token"]
            assert c.post("/v1/studies/w/members", json={"participant": f"h{i}"}).is_success
    return signed, tokens


def post(client, token, body):
    """POST until the answer is not a busy 503 (retried with the same bytes, as clients do)."""
    while True:
        r = client.post("/v1/studies/w/contributions", json=body,
                        headers={"Authorization": f"Bearer {token}"})
        if r.status_code != 503:
            return r
        time.sleep(float(r.headers["retry-after"]))


def stored_state(url):
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        contributions = conn.execute(sa.select(Contribution)).all()
        entries = conn.execute(sa.select(LedgerEntry)).all()
        participants = {p.id: p for p in conn.execute(sa.select(Participant)).all()}
        aggregate = conn.execute(sa.select(Aggregate)).one()
    engine.dispose()
    assert sorted(e.contribution_id for e in entries) == sorted(c.id for c in contributions)
    for p in participants.values():  # every charge itemised, none without its release
        assert p.eps_spent == sum(e.eps_units for e in entries if e.participant_id == p.id)
        assert p.eps_spent <= p.eps_cap
    assert sorted(c.model_version for c in contributions) == list(
        range(1, len(contributions) + 1))
    assert aggregate.version == len(contributions)
    assert aggregate.contributors == len({c.participant_id for c in contributions})
    return {c.idempotency_key: participants[c.participant_id].name for c in contributions}


def test_two_workers_store_and_charge_exactly(coordinator_server, server_url, coord_kit):
    server = coordinator_server(server_url, workers=2)
    signed, tokens = federation(server, coord_kit, n=6)
    rng = np.random.default_rng(3)
    jobs = [(name, tok, coord_kit.release(signed, rng)[0]) for name, tok in tokens.items()
            for _ in range(8)]  # 2 of each participant's 8 are over its cap
    jobs += [jobs[i] for i in rng.choice(len(jobs), size=6, replace=False)]  # exact retries
    rng.shuffle(jobs)
    with httpx.Client(base_url=server.url, timeout=120) as client, ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda job: (job, post(client, job[1], job[2])), jobs))
    assert len(answers) == len(jobs)  # every request answered
    accepted, ids = {}, {}
    for (name, _, body), r in answers:
        assert r.status_code in (200, 201, 409), r.text
        if r.status_code in (200, 201):
            accepted[body["idempotency_key"]] = name
            assert ids.setdefault(body["idempotency_key"], r.json()["id"]) == r.json()["id"]
        else:
            assert "budget" in r.json()["detail"]
    assert sorted(accepted.values()) == sorted(list(tokens) * 6)
    assert stored_state(server_url) == accepted


def test_sigkill_loses_no_acknowledged_release(coordinator_server, server_url, coord_kit):
    server = coordinator_server(server_url, workers=2)
    signed, tokens = federation(server, coord_kit, n=6)
    rng = np.random.default_rng(4)
    jobs = [(name, tok, coord_kit.release(signed, rng)[0]) for name, tok in tokens.items()
            for _ in range(6)]
    acknowledged, lock, killed = {}, threading.Lock(), threading.Event()
    client = httpx.Client(base_url=server.url, timeout=120)

    def send(job):
        name, token, body = job
        if killed.is_set():
            return
        try:
            ok = post(client, token, body).status_code in (200, 201)
        except httpx.TransportError:
            return
        with lock:
            if ok:
                acknowledged[body["idempotency_key"]] = name
            if len(acknowledged) == 8 and not killed.is_set():  # progress, not time
                killed.set()
                server.kill()

    with ThreadPoolExecutor(12) as pool:
        list(pool.map(send, jobs))
    client.close()
    assert killed.is_set() and len(acknowledged) >= 8
    server.start()
    stored = stored_state(server_url)
    assert acknowledged.items() <= stored.items()  # every acknowledged release is stored
