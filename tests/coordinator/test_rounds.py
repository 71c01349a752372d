"""Round endpoints: identity keys, a full secure round, restarts, recovery, refusals."""

from __future__ import annotations

import base64

import numpy as np
from coordinator_kit import ADMIN
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from secagg_honest import honest_vector

from common.secagg import participant as proto
from common.secagg import view
from common.secagg.messages import RoundRef
from common.secagg.wire import sign_frame
from common.wire.encoding import decode_counts
from common.wire.schemas import ModelPublic


def _open(client):
    r = client.post("/v1/studies/sec/rounds", headers=ADMIN)
    assert r.status_code == 201, r.text
    return r.json()


def _model(client):
    r = client.get("/v1/studies/sec/model", headers=ADMIN)
    model = ModelPublic.model_validate_json(r.text)
    return model, decode_counts(model.lsh, expected_cells=model.lsh.n_cells)[1]


def _keys_and_mask(hospitals, env):
    for h in hospitals:
        h.send("keys", h.state(), h.advert(h.state()))
    for h in hospitals:
        h.send("masked", h.state(), h.masked(h.state(), env))


def _unmask(hospitals, env):
    for h in hospitals:
        h.send("unmask", h.state(), h.unmask(h.state(), env))


def test_full_round_reveals_the_sum_and_charges_each_release_once(client, cohort):
    env, hs = cohort()
    assert _open(client)["status"] == "keys"
    _keys_and_mask(hs, env)
    _unmask(hs, env)
    model, total = _model(client)
    np.testing.assert_array_equal(total, sum(h.noisy for h in hs))
    assert (model.contributors, model.version) == (4, 1)
    rounds = client.get("/v1/studies/sec/rounds", headers=ADMIN).json()
    assert [(r["status"], r["cohort"], r["survivors"]) for r in rounds] == [("done", 4, 4)]
    budget = {b["participant"]: b for b in client.get("/v1/admin/budget", headers=ADMIN).json()}
    assert all(budget[h.e.name]["epsilon_spent"] == "0.5" for h in hs)


def test_a_member_that_holds_the_roster_reads_the_state_without_it(client, cohort):
    env, hs = cohort()
    _open(client)
    h0 = hs[0]
    assert h0.state().roster_digest is None
    for h in hs:
        h.send("keys", h.state(), h.advert(h.state()))
    full = h0.state()
    assert full.roster is not None and full.roster_digest == full.roster.digest()
    path = "/v1/studies/sec/rounds/current?known_roster="
    r = client.get(path + full.roster_digest, headers=h0.e.headers)
    assert r.status_code == 200 and "roster" not in r.json() and "adverts" not in r.json()
    assert "roster_digest" not in r.json() and len(r.content) < 2000  # the one it named
    near = h0.roster(full, env).holders("h0")  # its neighbours' adverts only, 96 bytes each
    assert len(base64.b85decode(full.adverts)) == 96 * len(near)
    assert r.json()["expected"] == ["h0"]  # the caller, not every name
    other = client.get(path + "0" * 64, headers=h0.e.headers).json()  # not the one it holds
    assert other["roster"] == view.compact(full.roster).model_dump(mode="json")
    assert "roster_digest" not in other  # the roster's SHA-256, once completed
    assert client.get(path + "xyz", headers=h0.e.headers).status_code == 422


def test_lost_before_masking_restarts_without_it_and_charges_once(client, cohort):
    env, hs = cohort()
    _open(client)
    for h in hs:
        h.send("keys", h.state(), h.advert(h.state()))
    first = {}
    for h in hs[:3]:  # h3 is lost before masking
        first[h.e.name] = h.masked(h.state(), env)
        h.send("masked", h.state(), first[h.e.name])
    r = client.post("/v1/studies/sec/rounds/1/advance", headers=ADMIN)
    assert (r.json()["attempt"], r.json()["status"], r.json()["expected"]) == (
        2, "keys", ["h0", "h1", "h2"])
    for h in hs[:3]:
        h.send("keys", h.state(), h.advert(h.state()))
    replay = hs[0].send("masked", hs[0].state(), first["h0"], status=409).json()["detail"]
    assert "open attempt is sec/1/2" in replay  # attempt 1's vector never enters attempt 2
    for h in hs[:3]:
        h.send("masked", h.state(), h.masked(h.state(), env))
    _unmask(hs[:3], env)
    _, total = _model(client)
    np.testing.assert_array_equal(total, sum(h.noisy for h in hs[:3]))
    budget = {b["participant"]: b for b in client.get("/v1/admin/budget", headers=ADMIN).json()}
    assert [budget[f"h{i}"]["epsilon_spent"] for i in range(4)] == ["0.5", "0.5", "0.5", "0"]


def _lose_h3_after_masking(client, hs, env):
    _open(client)
    _keys_and_mask(hs, env)
    for h in hs[:3]:
        assert h.state().inbox == {}  # no share is forwarded (or revealed) unless needed
        h.send("unmask", h.state(), h.unmask(h.state(), env))
    st3 = hs[3].state()
    late = hs[3].unmask(st3, env)  # made, but it would arrive after the admin declared h3 lost
    r = client.post("/v1/studies/sec/rounds/1/advance", headers=ADMIN)
    assert (r.json()["status"], r.json()["survivors"]) == ("recover", 3)
    return st3, late


def test_lost_after_masking_is_recovered_from_shares(client, cohort):
    env, hs = cohort()
    st3, late = _lose_h3_after_masking(client, hs, env)
    st = hs[0].state()
    assert list(st.inbox) == ["h3"] and st.request.kind == "recover"  # the lost one's only
    r = hs[3].send("unmask", st3, late, status=409)
    assert "phase 'recover', not 'unmask'" in r.json()["detail"]
    for h in hs[:3]:
        h.send("shares", h.state(), h.recover(h.state(), env))
    rounds = client.get("/v1/studies/sec/rounds", headers=ADMIN).json()
    assert [(r["status"], r["survivors"], r["recovered_by"]) for r in rounds] == [
        ("done", 3, 3)]
    _, total = _model(client)
    np.testing.assert_array_equal(total, sum(h.noisy for h in hs))


def test_recover_phase_refuses_shares_from_a_member_that_did_not_unmask(client, cohort):
    env, hs = cohort()
    _lose_h3_after_masking(client, hs, env)
    st = hs[3].state()
    frame = sign_frame("shares", hs[3].ref(st), "h3", bytes(16), hs[3].identity,
                       st.roster_digest)
    r = hs[3].send("shares", st, frame, status=409)
    assert "did not answer the unmask request" in r.json()["detail"]
    hs[0].send("shares", hs[0].state(), hs[0].advert(hs[0].state()), status=422)  # an advert
    for h in hs[:2]:
        h.send("shares", h.state(), h.recover(h.state(), env))
    r = client.post("/v1/studies/sec/rounds/1/advance", headers=ADMIN)  # h2 lost too: 2 shares
    doc = r.json()
    assert doc["status"] == "abandoned" and "2 distinct shares, 3 needed" in doc["detail"]
    assert _model(client)[0].version == 0


def test_too_many_lost_after_masking_abandons_without_a_sum(client, cohort):
    env, hs = cohort()
    _open(client)
    _keys_and_mask(hs, env)
    _unmask(hs[:2], env)
    r = client.post("/v1/studies/sec/rounds/1/advance", headers=ADMIN)
    assert r.json()["status"] == "abandoned" and "fewer than the threshold 3" in r.json()["detail"]
    model, _ = _model(client)
    assert model.version == 0


def test_replayed_reordered_and_forged_messages_are_refused(client, cohort):
    env, hs = cohort()
    _open(client)
    h0 = hs[0]
    st = h0.state()
    r = h0.send("masked", st, h0.advert(st), status=409)  # masked before the roster
    assert "phase 'keys', not 'masking'" in r.json()["detail"]
    forged = h0.advert(st)[:-64] + bytes(64)
    assert "signature" in h0.send("keys", st, forged, status=422).json()["detail"]
    other = proto.make_advert(RoundRef(study_id="sec", round=1, attempt=2), "h0", h0.identity,
                              h0.secrets[1])
    assert "open attempt is sec/1/1" in h0.send("keys", st, other, status=409).json()["detail"]
    stolen = hs[1].advert(st)  # another member's advert, re-sent by h0
    assert "signature" in h0.send("keys", st, stolen, status=422).json()["detail"]
    posing = proto.make_advert(h0.ref(st), "h1", h0.identity, h0.secrets[1])
    assert "another sender" in h0.send("keys", st, posing, 422).json()["detail"]
    h0.send("keys", st, h0.advert(st))
    h0.send("keys", st, h0.advert(st))  # the same bytes again: an idempotent retry
    fresh = proto.make_advert(h0.ref(st), "h0", h0.identity, proto.RoundSecrets.generate())
    assert "different advert" in h0.send("keys", st, fresh, status=409).json()["detail"]
    for h in hs[1:]:
        h.send("keys", h.state(), h.advert(h.state()))
    assert "phase 'masking'" in h0.send("keys", st, h0.advert(st), status=409).json()["detail"]


def test_identity_keys_are_set_once_and_independent_routes_refuse_secure_studies(
    client, cohort, coord_kit
):
    env, hs = cohort()
    h0 = hs[0]
    assert h0.post("/v1/me/identity-key", h0.identity_body(h0.identity)).status_code == 200
    r = h0.post("/v1/me/identity-key", h0.identity_body(Ed25519PrivateKey.generate()))
    assert r.status_code == 409 and "another identity key" in r.json()["detail"]
    body, _, _ = coord_kit.release(env.signed.model_dump(), np.random.default_rng(0))
    r = h0.post("/v1/studies/sec/contributions", body)
    assert r.status_code == 409 and "secure aggregation" in r.json()["detail"]
    _open(client)
    r = client.post("/v1/studies/sec/rounds", headers=ADMIN)
    assert r.status_code == 409 and "still open" in r.json()["detail"]


def test_a_round_needs_enough_registered_members(client, make_participant, coord_kit):
    spec = coord_kit.study_spec("sec", n_tables=5)
    spec["aggregation"] = {"mode": "secure", "cohort_size": 4, "max_dropouts": 1,
                           "max_colluders": 1}
    assert client.post("/v1/studies", json=spec, headers=ADMIN).status_code == 201
    r = client.post("/v1/studies/sec/rounds", headers=ADMIN)
    assert r.status_code == 409 and "no membership certificate" in r.json()["detail"]
    client.post("/v1/studies", json=coord_kit.study_spec("ind", n_tables=5), headers=ADMIN)
    r = client.post("/v1/studies/ind/rounds", headers=ADMIN)
    assert r.status_code == 409 and "independent noise" in r.json()["detail"]


def test_dashboard_lists_each_round_attempt(client, cohort, app):
    from coordinator.dashboard.pages import dashboard_page

    env, hs = cohort()
    _open(client)
    for h in hs:
        h.send("keys", h.state(), h.advert(h.state()))
    for h in hs[:3]:
        h.send("masked", h.state(), h.masked(h.state(), env))
    client.post("/v1/studies/sec/rounds/1/advance", headers=ADMIN)
    with app.state.sessionmaker() as session:
        html = dashboard_page(session, "k")
    assert '<tr data-round="sec/1/1"><td>sec</td><td class="num">1</td><td class="num">1</td>' \
           "<td>secure</td><td>restarted</td>" in html
    assert '<td class="num" data-field="cohort">4</td>' in html
    assert 'data-round="sec/1/2"' in html and "<td>keys</td>" in html


def test_frames_are_parsed_strictly_over_http(client, cohort):
    """Wrong media type 415, truncated or padded 422, oversized 413, tampered 422; none of
    them is stored or charged, and the genuine frame is then accepted."""
    env, hs = cohort()
    _open(client)
    for h in hs:
        h.send("keys", h.state(), h.advert(h.state()))
    h0, st = hs[0], hs[0].state()
    frame = h0.masked(st, env)
    r = h0.send("masked", st, frame, status=415, content_type="application/json")
    assert "application/octet-stream" in r.json()["detail"]
    assert "truncated" in h0.send("masked", st, frame[:-1], status=422).json()["detail"]
    assert "this round's is" in h0.send("masked", st, frame + b"\0", status=413).json()["detail"]
    assert "expected a masked frame" in h0.send(
        "masked", st, bytes([1]) + frame[1:], status=422).json()["detail"]
    for at in (12, len(frame) // 2, len(frame) - 70, len(frame) - 1):  # body, shares, signature
        bad = frame[:at] + bytes([frame[at] ^ 0x10]) + frame[at + 1 :]
        assert "signature" in h0.send("masked", st, bad, status=422).json()["detail"]
    assert _masked(client) == 0
    budget = {b["participant"]: b for b in client.get("/v1/admin/budget", headers=ADMIN).json()}
    assert budget["h0"]["epsilon_spent"] == "0"
    h0.send("masked", st, frame)
    assert _masked(client) == 1


def _masked(client) -> int:
    """Masked frames accepted in the open attempt (the admin's view: a member's view leaves
    the counts out until the round is over)."""
    return client.get("/v1/studies/sec/rounds", headers=ADMIN).json()[-1]["masked"]


def test_a_poked_cell_rejects_the_sum_and_the_next_round_merges(client, cohort, app):
    """Issue 25: one member adds +50,000 to one cell of its noisy vector before masking. The
    revealed sum is not merged: the round ends 'rejected' with the reason in the listing and
    on the dashboard, the model stays as it was, every member is charged exactly once (their
    noise was drawn and sent), and the next honest round merges."""
    from coordinator.dashboard.pages import dashboard_page

    env, hs = cohort()
    rng = np.random.default_rng(7)
    hs[1].noisy = hs[1].noisy.copy()
    hs[1].noisy[3] += 50_000
    _open(client)
    _keys_and_mask(hs, env)
    _unmask(hs, env)
    (rejected,) = client.get("/v1/studies/sec/rounds", headers=ADMIN).json()
    assert rejected["status"] == "rejected" and rejected["survivors"] == 4
    assert "revealed sum rejected: LSH table" in rejected["detail"]
    assert "model keeps its last value" in rejected["detail"]
    model = ModelPublic.model_validate_json(
        client.get("/v1/studies/sec/model", headers=ADMIN).text)
    assert (model.version, model.contributors) == (0, 0)
    budget = {b["participant"]: b for b in client.get("/v1/admin/budget", headers=ADMIN).json()}
    assert [budget[h.e.name]["epsilon_spent"] for h in hs] == ["0.5"] * 4
    with app.state.sessionmaker() as session:
        html = dashboard_page(session, "k")
    assert "<td>rejected</td>" in html and "revealed sum rejected: LSH table" in html
    assert hs[0].state().status == "rejected"  # what a member's client reads

    for h in hs:  # round 2: fresh round keys, honest vectors
        h.secrets, h.unmasked = {}, None
        h.noisy = honest_vector(env.config, rng)
    assert _open(client)["round"] == 2
    _keys_and_mask(hs, env)
    _unmask(hs, env)
    model, total = _model(client)
    np.testing.assert_array_equal(total, sum(h.noisy for h in hs))
    assert (model.version, model.contributors) == (1, 4)
    budget = {b["participant"]: b for b in client.get("/v1/admin/budget", headers=ADMIN).json()}
    assert [budget[h.e.name]["epsilon_spent"] for h in hs] == ["1"] * 4
