"""PUT /v1/studies/{id}/membership and rounds opened with exactly the certified members."""

from __future__ import annotations

import pytest
from coordinator_kit import ADMIN
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from common.secagg.membership import SignedMembership, sign_membership

# ``cohort`` (tests/coordinator/conftest.py): n = 4, D = 1, T = 1; the first four hospitals
# certified (v1).


def _open(client):
    return client.post("/v1/studies/sec/rounds", headers=ADMIN)


def test_a_round_opens_with_exactly_the_certified_members(client, cohort):
    env, hs = cohort(5)  # five enrolled, four certified: h4 is never in the round
    r = _open(client)
    assert r.status_code == 201 and r.json()["expected"] == ["h0", "h1", "h2", "h3"]
    st = hs[0].state()
    assert st.membership is None and st.roster is None  # served with the roster only
    got = client.get("/v1/studies/sec/membership", headers=hs[0].e.headers)
    assert SignedMembership.model_validate(got.json()).body().members["h0"] == hs[0].pub


def test_a_registered_key_other_than_the_certified_one_blocks_the_round(client, cohort):
    env, hs = cohort()
    real = hs[2].identity
    hs[2].identity = Ed25519PrivateKey.generate()  # the DPO was sent another key
    assert env.certify(client, hs, ADMIN, version=2).status_code == 200
    hs[2].identity = real
    r = _open(client)
    assert r.status_code == 409 and "another identity key" in r.json()["detail"]


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"study_id": "other"}, "for study 'other'"),
        ({"max_colluders": 2}, "(n, D, T)"),
        ({"members": {}}, "0 members"),
    ],
)
def test_a_membership_that_members_would_refuse_is_refused(client, cohort, change, detail):
    env, hs = cohort()
    body = SignedMembership.model_validate(
        client.get("/v1/studies/sec/membership", headers=hs[0].e.headers).json()).body()
    signed = sign_membership(body.model_copy(update={**change, "version": 2}), env.consortium)
    r = client.put("/v1/studies/sec/membership", json=signed.model_dump(), headers=ADMIN)
    assert r.status_code == 409 and detail in r.json()["detail"]


def test_an_older_membership_version_is_refused_and_only_the_admin_uploads(client, cohort):
    env, hs = cohort()
    assert env.certify(client, hs, ADMIN, version=3).status_code == 200
    r = env.certify(client, hs, ADMIN, version=2)
    assert r.status_code == 409 and "older" in r.json()["detail"]
    assert env.certify(client, hs, hs[0].e.headers).status_code in (401, 403)
