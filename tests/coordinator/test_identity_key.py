"""Identity-key registration carries a proof of possession.

Nobody can register a key it does not hold (422 before anything is looked up), so the 409
for a key registered to another participant only ever reaches that key's holder; the same
key twice is idempotent; no answer is ever a 500.
"""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from common.errors import InvalidInput
from common.secagg.identity import sign_identity_proof, verify_identity_proof
from common.secagg.keys import raw_public
from common.secagg.messages import b64e


def _key_id(client) -> str:
    return client.get("/v1/key").json()["key_id"]


def _body(key, key_id: str, name: str, *, public=None) -> dict[str, str]:
    return {"public_key": b64e(raw_public(public or key)),
            "proof": sign_identity_proof(key, key_id, name)}


def _register(client, who, body):
    return client.post("/v1/me/identity-key", json=body, headers=who.headers)


@pytest.fixture
def two(make_participant):
    return make_participant("h1"), make_participant("h2")


def test_same_key_twice_is_idempotent(client, two):
    h1, _ = two
    key = Ed25519PrivateKey.generate()
    body = _body(key, _key_id(client), "h1")
    assert _register(client, h1, body).status_code == 201
    again = _register(client, h1, body)
    assert again.status_code == 200 and again.json()["public_key"] == body["public_key"]


@pytest.mark.parametrize("forgery", ["no proof", "own key's proof", "other name", "other key id",
                                     "garbage"])
def test_another_participants_key_without_its_private_key_is_422(client, two, forgery):
    h1, h2 = two
    victim = Ed25519PrivateKey.generate()
    key_id = _key_id(client)
    assert _register(client, h1, _body(victim, key_id, "h1")).status_code == 201
    mine = Ed25519PrivateKey.generate()
    body = {
        "no proof": {"public_key": b64e(raw_public(victim))},
        "own key's proof": _body(mine, key_id, "h2", public=victim),
        "other name": _body(victim, key_id, "h1"),  # h1's own proof, replayed by h2
        "other key id": _body(victim, "sha256:" + "0" * 64, "h2"),  # another coordinator
        "garbage": {"public_key": b64e(raw_public(victim)), "proof": "A" * 88},
    }[forgery]
    r = _register(client, h2, body)
    assert r.status_code == 422, r.text
    assert "proof" in r.json()["detail"]
    # the forger learns nothing: the same 422 as for a key nobody registered
    fresh = Ed25519PrivateKey.generate()
    unregistered = {**body, "public_key": b64e(raw_public(fresh))}
    r2 = _register(client, h2, unregistered)
    assert (r2.status_code, r2.json()["detail"]) == (r.status_code, r.json()["detail"])


def test_the_holder_registering_its_key_under_a_second_name_is_409(client, two):
    h1, h2 = two
    key = Ed25519PrivateKey.generate()
    key_id = _key_id(client)
    assert _register(client, h1, _body(key, key_id, "h1")).status_code == 201
    r = _register(client, h2, _body(key, key_id, "h2"))
    assert r.status_code == 409 and "registered to another participant" in r.json()["detail"]
    # h2 can still register a key of its own
    assert _register(client, h2, _body(Ed25519PrivateKey.generate(), key_id, "h2")
                     ).status_code == 201


def test_a_second_key_for_the_same_participant_is_409(client, two):
    h1, _ = two
    key_id = _key_id(client)
    assert _register(client, h1, _body(Ed25519PrivateKey.generate(), key_id, "h1")
                     ).status_code == 201
    r = _register(client, h1, _body(Ed25519PrivateKey.generate(), key_id, "h1"))
    assert r.status_code == 409 and "another identity key" in r.json()["detail"]


def test_verify_identity_proof_is_bound_to_every_field():
    key = Ed25519PrivateKey.generate()
    public = b64e(raw_public(key))
    proof = sign_identity_proof(key, "sha256:ab", "h1")
    verify_identity_proof(public, proof, "sha256:ab", "h1")
    for key_id, name in (("sha256:ac", "h1"), ("sha256:ab", "h2"), ("sha256:ab", "h1\x00")):
        with pytest.raises(InvalidInput, match="proof does not verify"):
            verify_identity_proof(public, proof, key_id, name)
