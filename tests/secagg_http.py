"""A secure-aggregation participant driven step by step over HTTP with the pure protocol
functions (any client with ``get``/``post``: FastAPI's TestClient or an ``httpx.Client``)."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from common.config import StudyConfig
from common.secagg import participant as proto
from common.secagg.messages import RoundRef, SignedMessage, b64e
from common.secagg.schemas import RoundState
from common.secagg.wire import OCTET_STREAM
from common.signing import SignedConfig, public_key_from_pem


class Hospital:
    """A participant driven step by step with the pure protocol functions."""

    def __init__(self, client, enrolled, study, noisy):
        self.c, self.e, self.study, self.noisy = client, enrolled, study, noisy
        self.identity = Ed25519PrivateKey.generate()
        self.secrets: dict[int, proto.RoundSecrets] = {}
        self.unmasked: int | None = None
        r = self.post("/v1/me/identity-key", {"public_key": self.pub})
        assert r.status_code == 201, r.text

    @property
    def pub(self):
        return b64e(proto.raw_public(self.identity))

    def post(self, path, body):
        return self.c.post(path, json=body, headers=self.e.headers)

    def state(self) -> RoundState:
        r = self.c.get(f"/v1/studies/{self.study}/rounds/current", headers=self.e.headers)
        assert r.status_code == 200, r.text
        return RoundState.model_validate_json(r.text)

    def ref(self, st):
        return RoundRef(study_id=self.study, round=st.round, attempt=st.attempt)

    def advert(self, st) -> bytes:
        secrets = self.secrets.setdefault(st.attempt, proto.RoundSecrets.generate())
        return proto.make_advert(self.ref(st), self.e.name, self.identity, secrets)

    def send(self, what, st, msg, status=200, content_type=OCTET_STREAM):
        """POST a frame (bytes, as application/octet-stream) or a signed JSON message."""
        path = f"/v1/studies/{self.study}/rounds/{st.round}/{what}"
        if isinstance(msg, SignedMessage):
            r = self.post(path, msg.model_dump(mode="json"))
        else:
            r = self.c.post(path, content=msg,
                            headers={**self.e.headers, "Content-Type": content_type})
        assert r.status_code == status, r.text
        return r

    def roster(self, st, env):
        return proto.check_roster(
            st.roster, me=self.e.name, my_advert=self.advert(st),
            coordinator_key=env.key, ref=self.ref(st), params=env.config.aggregation,
            config_digest=env.digest, modulus_bits=env.config.secure_modulus_bits(),
        )

    def masked(self, st, env) -> bytes:
        return proto.mask_upload(self.roster(st, env), me=self.e.name, identity=self.identity,
                                 secrets=self.secrets[st.attempt], noisy=self.noisy)

    def unmask(self, st, env) -> bytes:
        def record(a):
            self.unmasked = a

        return proto.answer_unmask(
            st.request, self.roster(st, env), me=self.e.name, identity=self.identity,
            secrets=self.secrets[st.attempt], coordinator_key=env.key,
            params=env.config.aggregation, unmasked_attempt=self.unmasked, record=record,
        )

    def recover(self, st, env) -> SignedMessage:
        return proto.answer_recover(
            st.request, self.roster(st, env), me=self.e.name, identity=self.identity,
            secrets=self.secrets[st.attempt], inbox=st.inbox, coordinator_key=env.key,
            unmasked_attempt=self.unmasked,
        )


class Env:
    def __init__(self, client, signed):
        self.signed = SignedConfig.model_validate(signed)
        self.config = StudyConfig.model_validate_json(self.signed.payload)
        self.digest = self.signed.digest()
        self.key = public_key_from_pem(client.get("/v1/key").json()["public_key_pem"])
