"""A secure-aggregation participant driven step by step over HTTP with the pure protocol
functions (any client with ``get``/``post``: FastAPI's TestClient or an ``httpx.Client``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from common.secagg import participant as proto
from common.secagg.answers import answer_recover, answer_unmask
from common.secagg.beacon import verify_beacon
from common.secagg.identity import sign_identity_proof
from common.secagg.membership import MembershipBody, sign_membership, verify_membership
from common.secagg.messages import RoundRef, SignedMessage, b64e
from common.secagg.schemas import RoundState
from common.secagg.view import complete_state
from common.secagg.wire import OCTET_STREAM
from common.study.config import StudyConfig
from common.study.signing import SignedConfig, public_key_from_pem


@dataclass
class Member:
    """An enrolled participant as the tests drive it: its name and bearer token."""

    name: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


class Hospital:
    """A participant driven step by step with the pure protocol functions."""

    def __init__(self, client, enrolled, study, noisy):
        self.c, self.e, self.study, self.noisy = client, enrolled, study, noisy
        self.identity = Ed25519PrivateKey.generate()
        self.secrets: dict[int, proto.RoundSecrets] = {}
        self.unmasked: int | None = None
        self.masked_at: int | None = None
        r = self.post("/v1/me/identity-key", self.identity_body(self.identity))
        assert r.status_code == 201, r.text

    def identity_body(self, key: Ed25519PrivateKey, name: str | None = None) -> dict[str, str]:
        """A registration of ``key`` with its proof of possession for ``name`` (default: us)."""
        key_id = self.c.get("/v1/key").json()["key_id"]
        return {"public_key": b64e(proto.raw_public(key)),
                "proof": sign_identity_proof(key, key_id, name or self.e.name)}

    @property
    def pub(self):
        return b64e(proto.raw_public(self.identity))

    def post(self, path, body):
        return self.c.post(path, json=body, headers=self.e.headers)

    def state(self) -> RoundState:
        """The served compact state, completed as a member does (common.secagg.view)."""
        r = self.c.get(f"/v1/studies/{self.study}/rounds/current", headers=self.e.headers)
        assert r.status_code == 200, r.text
        config = self.c.get(f"/v1/studies/{self.study}/config", headers=self.e.headers)
        signed = SignedConfig.model_validate_json(config.text)
        study = StudyConfig.model_validate_json(signed.payload)
        params = study.aggregation
        return complete_state(RoundState.model_validate_json(r.text), study=self.study,
                              config_digest=signed.digest(), degree=params.degree,
                              modulus_bits=study.secure_modulus_bits(),
                              threshold=params.threshold)

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
        certified = verify_membership(
            st.membership, env.consortium.public_key(), study=self.study,
            params=env.config.aggregation, now=datetime.now(UTC),
        )
        beacon = None
        if env.config.aggregation.needs_beacon:  # as participant.secagg.checks does
            beacon = verify_beacon(st.beacon, self.ref(st), st.roster.digest(),
                                   env.consortium.public_key())
        return proto.check_roster(
            st.roster, me=self.e.name, my_advert=self.advert(st),
            coordinator_key=env.key, ref=self.ref(st), params=env.config.aggregation,
            config_digest=env.digest, modulus_bits=env.config.secure_modulus_bits(),
            identities=certified.members, adverts=st.adverts, beacon=beacon,
        )

    def masked(self, st, env) -> bytes:
        frame = proto.mask_upload(self.roster(st, env), me=self.e.name, identity=self.identity,
                                  secrets=self.secrets[st.attempt], noisy=self.noisy,
                                  unmasked_attempt=self.unmasked)
        self.masked_at = st.attempt
        return frame

    def unmask(self, st, env) -> bytes:
        def record(a):
            self.unmasked = a

        return answer_unmask(
            st.request, self.roster(st, env), me=self.e.name, identity=self.identity,
            secrets=self.secrets[st.attempt], coordinator_key=env.key, acks=st.acks,
            params=env.config.aggregation, unmasked_attempt=self.unmasked,
            masked_attempt=self.masked_at, record=record,
        )

    def recover(self, st, env) -> SignedMessage:
        return answer_recover(
            st.request, self.roster(st, env), me=self.e.name, identity=self.identity,
            secrets=self.secrets[st.attempt], inbox=st.inbox, coordinator_key=env.key,
            unmasked_attempt=self.unmasked, masked_attempt=self.masked_at,
        )


class Env:
    def __init__(self, client, signed):
        self.signed = SignedConfig.model_validate(signed)
        self.config = StudyConfig.model_validate_json(self.signed.payload)
        self.digest = self.signed.digest()
        self.key = public_key_from_pem(client.get("/v1/key").json()["public_key_pem"])
        self.consortium = Ed25519PrivateKey.generate()

    def certify(self, client, hospitals, headers, version=1):
        """Play the data-protection officer: sign the first n hospitals (padded with absent
        members when fewer) and upload the certificate; returns the upload's response."""
        params = self.config.aggregation
        members = {h.e.name: h.pub for h in sorted(hospitals, key=lambda h: h.e.name)}
        members = dict(list(members.items())[: params.cohort_size])
        while len(members) < params.cohort_size:
            members[f"absent-{len(members)}"] = b64e(
                proto.raw_public(Ed25519PrivateKey.generate()))
        body = MembershipBody(
            study_id=self.config.study_id, version=version,
            expires_at=datetime.now(UTC) + timedelta(days=1),
            cohort_size=params.cohort_size, max_dropouts=params.max_dropouts,
            max_colluders=params.max_colluders, members=members,
        )
        signed = sign_membership(body, self.consortium)
        return client.put(f"/v1/studies/{self.config.study_id}/membership",
                          json=signed.model_dump(), headers=headers)


def certify_states(consortium, study, aggregation: dict, states: dict) -> dict:
    """The DPO's certificate (JSON) of the hospitals whose state directories are ``states``
    (name -> Path): each one's identity key, read from its state as it would send it."""
    from common.secagg.params import AggregationParams
    from common.study.signing import load_private_key
    from participant.consortium.cli import certify, raw_key

    members = {name: raw_key(load_private_key(Path(s) / "identity_key.pem").public_key())
               for name, s in states.items()}
    signed = certify(study, AggregationParams(**aggregation), members, consortium,
                     expires_at=datetime.now(UTC) + timedelta(days=1))
    return signed.model_dump()
