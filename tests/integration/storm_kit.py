"""A storm of concurrent contributions to one study, for the coordinator's concurrency tests:
twenty members with small caps, and the invariants the stored state must keep afterwards."""

from __future__ import annotations

import base64
import zlib

import httpx
import numpy as np
import sqlalchemy as sa

from common.wire.encoding import EncodedCounts, decode_counts
from coordinator.db.tables import Contribution, LedgerEntry, Participant

N_PARTICIPANTS = 20
CAP = "5"  # 10 releases at epsilon 0.5


def setup_federation(server, coord_kit, n=N_PARTICIPANTS):
    admin = {"Authorization": f"Bearer {server.admin_token}"}
    with httpx.Client(base_url=server.url, headers=admin, timeout=30) as c:
        r = c.post("/v1/studies", json=coord_kit.study_spec("storm"))
        assert r.status_code == 201, r.text
        signed = r.json()["config"]
        tokens = {}
        for i in range(n):
            name = f"h{i:02d}"
            r = c.post("/v1/participants", json={"name": name, "epsilon_cap": CAP})
            tokens[name] = r.json()["token"]
            assert c.post("/v1/studies/storm/members", json={"participant": name}).is_success
    return signed, tokens


def model_lsh(server):
    admin = {"Authorization": f"Bearer {server.admin_token}"}
    model = httpx.get(f"{server.url}/v1/studies/storm/model", headers=admin, timeout=30).json()
    enc = model["lsh"]
    raw = zlib.decompress(base64.b64decode(enc["data"]))
    return np.frombuffer(raw, dtype=np.dtype(enc["dtype"])).astype(np.int64), model


def check_invariants(server, database_url, acknowledged):
    """Everything the brief asks; ``acknowledged`` maps idempotency key -> lsh values."""
    engine = sa.create_engine(database_url)
    with engine.connect() as conn:
        contributions = conn.execute(sa.select(Contribution)).all()
        entries = conn.execute(sa.select(LedgerEntry)).all()
        participants = conn.execute(sa.select(Participant)).all()
    engine.dispose()
    stored, latest, previous = {}, {}, {}
    for c in sorted(contributions, key=lambda c: c.id):
        enc = EncodedCounts.model_validate_json(c.lsh_payload)
        stored[c.idempotency_key] = decode_counts(enc, expected_cells=enc.n_cells)[1]
        assert c.replaces_id == previous.get(c.participant_id), "a broken replacement chain"
        previous[c.participant_id] = c.id
        latest[c.participant_id] = stored[c.idempotency_key]
    assert set(acknowledged) <= set(stored), "an acknowledged contribution is missing"
    for key, values in acknowledged.items():
        np.testing.assert_array_equal(stored[key], values)
    assert sorted(c.model_version for c in contributions) == list(range(1, len(stored) + 1))
    total, model = model_lsh(server)
    np.testing.assert_array_equal(total, np.sum(list(latest.values()), axis=0))
    assert model["contributors"] == len(latest) and model["version"] == len(contributions)
    assert sorted(e.contribution_id for e in entries) == sorted(c.id for c in contributions)
    for p in participants:
        charges = [e for e in entries if e.participant_id == p.id]
        assert p.eps_spent == sum(e.eps_units for e in charges)
        assert p.eps_spent <= p.eps_cap
    return stored
