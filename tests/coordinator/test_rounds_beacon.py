"""The beacon phase of a secure round (coordinator.services.secagg.beacon): a study whose
masking graph is sparse waits after its roster for the consortium's beacon signature."""

from __future__ import annotations

import json
from decimal import Decimal

import numpy as np
import pytest
from coordinator_kit import ADMIN
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from secagg_honest import honest_vector
from secagg_http import Env, Hospital

from common.secagg.beacon import sign_beacon
from common.secagg.draws import BEACON_DRAWS, sign_draw
from common.secagg.messages import RoundRef, SignedMessage, b64e

pytestmark = pytest.mark.slow  # a 40-member secure round per test

N, D, T = 40, 4, 2  # a small sparse cohort (k = 4, t = 3): it needs the beacon


@pytest.fixture
def beacon_round(client, make_participant, coord_kit):
    """A secure study of n = 40 (D = 4, T = 2), every member's keys posted: phase beacon."""
    people = [make_participant(f"h{i:02d}", delta_cap="1e-9") for i in range(N)]
    spec = coord_kit.study_spec("sec", n_tables=3, epsilon_lsh="0.5")
    spec["aggregation"] = {"mode": "secure", "cohort_size": N, "max_dropouts": D,
                           "max_colluders": T}
    r = client.post("/v1/studies", json=spec, headers=ADMIN)
    assert r.status_code == 201, r.text
    for p in people:
        client.post("/v1/studies/sec/members", json={"participant": p.name}, headers=ADMIN)
    env = Env(client, r.json()["config"])
    assert env.config.aggregation.needs_beacon
    rng = np.random.default_rng(5)
    hospitals = [Hospital(client, p, "sec", honest_vector(env.config, rng)) for p in people]
    assert env.certify(client, hospitals, ADMIN).status_code == 200
    assert client.post("/v1/studies/sec/rounds", headers=ADMIN).status_code == 201
    for h in hospitals:
        h.send("keys", h.state(), h.advert(h.state()))
    return env, hospitals


def _pending(client):
    r = client.get("/v1/studies/sec/rounds/beacon")  # no credential: the key holder has none
    assert r.status_code == 200, r.text
    return r.json()


NAMES = [f"h{i:02d}" for i in range(N)]  # every member posted keys: all are in the roster


def _draws(ref, digest, key, counts):
    return {m: {"count": c, "signature": sign_draw(ref, digest, m, c, key)}
            for m, c in counts.items()}


def _beacon(env, pending, key=None, counts=None, **update):
    roster = SignedMessage.model_validate(pending["roster"])
    ref = RoundRef(study_id="sec", round=pending["round"], attempt=pending["attempt"])
    key = key or env.consortium
    body = {"attempt": ref.attempt, "roster_digest": roster.digest(),
            "signature": sign_beacon(ref, roster.digest(), key),
            "consortium_key": b64e(env.consortium.public_key().public_bytes_raw()),
            "draws": _draws(ref, roster.digest(), key,
                            counts or {m: 1 + i % 3 for i, m in enumerate(NAMES)})}
    return {**body, **update}


def test_the_round_waits_for_the_beacon_then_masks_with_its_graph_and_reveals(client,
                                                                               beacon_round):
    env, hs = beacon_round
    st = hs[0].state()
    assert (st.status, st.roster, st.beacon) == ("beacon", None, None)  # nothing to mask yet
    pending = _pending(client)
    assert (pending["round"], pending["attempt"]) == (1, 1)
    body = _beacon(env, pending)
    for _ in range(2):  # a retry of the same signature is a no-op
        r = client.post("/v1/studies/sec/rounds/1/beacon", json=body)
        assert (r.status_code, r.json()["status"]) == (200, "masking"), r.text
    assert client.get("/v1/studies/sec/rounds/beacon").status_code == 404
    st = hs[0].state()
    assert st.beacon == body["signature"] and st.roster is not None
    for h in hs[:4]:  # each member is served its own draw statement only
        served = client.get("/v1/studies/sec/rounds/current", headers=h.e.headers).json()
        assert served["draw"] == body["draws"][h.e.name]
        text = json.dumps(served)
        assert not any(d["signature"] in text for m, d in body["draws"].items()
                       if m != h.e.name)
    assert hs[1].state().draw.count == 2 and hs[2].state().draw.count == 3
    for h in hs:
        h.send("masked", h.state(), h.masked(h.state(), env))
    for h in hs:
        h.send("unmask", h.state(), h.unmask(h.state(), env))
    rounds = client.get("/v1/studies/sec/rounds", headers=ADMIN).json()
    assert [(r["status"], r["cohort"]) for r in rounds] == [("done", N)]
    budget = {b["participant"]: b for b in client.get("/v1/admin/budget", headers=ADMIN).json()}
    charged = Decimal(budget["h00"]["delta_spent"])
    assert charged == env.config.aggregation.graph_delta == env.config.release_cost().delta
    assert BEACON_DRAWS == 8  # a positive bound's charge: tests/common/test_secagg_graph.py


WAITING = "no attempt of 'sec' waits for a beacon signature"


def test_bad_beacon_posts_are_refused_with_4xx_and_the_round_keeps_waiting(client,
                                                                           beacon_round):
    env, hs = beacon_round
    pending = _pending(client)
    other = Ed25519PrivateKey.generate()
    cases = [
        (_beacon(env, pending, other), 422, "does not verify under the consortium key"),
        (_beacon(env, pending, other, consortium_key=b64e(other.public_key().public_bytes_raw())),
         422, "did not sign this study's membership certificate"),
        (_beacon(env, pending, roster_digest="cd" * 32), 404, WAITING),
        (_beacon(env, pending, attempt=2), 404, WAITING),
        (_beacon(env, pending, signature="!" * 88), 422, ""),
        (_beacon(env, pending, draws={}), 422, "not for exactly the 40 roster members"),
        (_beacon(env, pending, counts={m: 1 for m in NAMES[1:]}), 422, "not for exactly"),
        (_beacon(env, pending, counts={**{m: 1 for m in NAMES}, "zz": 1}), 422,
         "not for exactly"),
        (_beacon(env, pending, draws={**_beacon(env, pending)["draws"], "h03": {
            "count": 7, "signature": _beacon(env, pending)["draws"]["h03"]["signature"]}}),
         422, "draw count 7 for h03 in sec/1/1 does not verify"),
        (_beacon(env, pending, draws={**_beacon(env, pending)["draws"], "h03": _beacon(
            env, pending, other)["draws"]["h03"]}), 422, "for h03 in sec/1/1 does not verify"),
        (_beacon(env, pending, draws={**_beacon(env, pending)["draws"], "h03": _beacon(
            env, pending)["draws"]["h04"]}), 422, "for h03 in sec/1/1 does not verify"),
        ({**_beacon(env, pending), "extra": 1}, 422, ""),
    ]
    for body, code, detail in cases:
        r = client.post("/v1/studies/sec/rounds/1/beacon", json=body)
        assert r.status_code == code and detail in r.text, (body, r.text)
    for study, number in [("sec", 2), ("sec", 9), ("nope", 1)]:  # one answer: no oracle
        r = client.post(f"/v1/studies/{study}/rounds/{number}/beacon",
                        json=_beacon(env, pending))
        assert (r.status_code, r.json()) == (
            404, {"detail": f"no attempt of {study!r} waits for a beacon signature"})
    r = client.post("/v1/studies/sec/rounds/1/advance", headers=ADMIN)
    assert r.status_code == 409 and "waits for the consortium's beacon" in r.json()["detail"]
    assert hs[0].state().status == "beacon" and _pending(client) == pending


def test_no_attempt_above_the_cap_is_opened(client, beacon_round, monkeypatch):
    """Lost before masking in the last attempt the beacon signs: abandoned, not restarted."""
    monkeypatch.setattr("coordinator.services.secagg.rounds.BEACON_ATTEMPTS", 1)
    env, hs = beacon_round
    assert client.post("/v1/studies/sec/rounds/1/beacon",
                       json=_beacon(env, _pending(client))).status_code == 200
    for h in hs[1:]:
        h.send("masked", h.state(), h.masked(h.state(), env))
    r = client.post("/v1/studies/sec/rounds/1/advance", headers=ADMIN)
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["attempt"]) == ("abandoned", 1)
    assert "signs at most 1 attempts per round" in r.json()["detail"]


def test_a_study_whose_graph_cannot_be_bad_has_no_beacon_phase(client, make_participant,
                                                                 coord_kit):
    people = [make_participant(f"h{i}") for i in range(4)]
    spec = coord_kit.study_spec("small", n_tables=3)
    spec["aggregation"] = {"mode": "secure", "cohort_size": 4, "max_dropouts": 1,
                           "max_colluders": 1}
    r = client.post("/v1/studies", json=spec, headers=ADMIN)
    for p in people:
        client.post("/v1/studies/small/members", json={"participant": p.name}, headers=ADMIN)
    env = Env(client, r.json()["config"])
    hs = [Hospital(client, p, "small", np.zeros(env.config.secure_cells, dtype=np.int64))
          for p in people]
    env.certify(client, hs, ADMIN)
    client.post("/v1/studies/small/rounds", headers=ADMIN)
    for h in hs:
        h.send("keys", h.state(), h.advert(h.state()))
    served = client.get("/v1/studies/small/rounds/current", headers=hs[0].e.headers).json()
    assert served["status"] == "masking" and "beacon" not in served
    for path in ("/v1/studies/small/rounds/beacon", "/v1/studies/nope/rounds/beacon"):
        r = client.get(path)  # one answer: no study-existence oracle without a credential
        assert r.status_code == 404 and "waits for a beacon signature" in r.json()["detail"]
    pending = {"round": 1, "attempt": 1, "roster": {"kind": "roster", "payload": "{}",
                                                    "signature": ""}}
    r = client.post("/v1/studies/small/rounds/1/beacon", json=_beacon(env, pending))
    assert r.status_code == 404
