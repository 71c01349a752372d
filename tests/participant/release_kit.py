"""A fake coordinator for the release tests (httpx.MockTransport): serves the key and a signed
config, answers contributions with the status codes a test queues; and an Agent enrolled
with it."""

from __future__ import annotations

import httpx

from common.study.config import FeatureSpec, GridParams, PrivacyParams, new_study_config
from common.study.signing import generate_key, key_fingerprint, public_key_pem, sign_config
from participant.agent import Agent

FEATS = [FeatureSpec(name=n, lo=0.0, hi=1.0) for n in ("a", "b", "c")]


class FakeCoordinator:
    """Serves /v1/key and a signed config; answers contributions with ``status`` (a list)."""

    def __init__(self, grid: GridParams | None = None, delta: str = "0") -> None:
        self.key = generate_key()
        privacy = PrivacyParams(epsilon_lsh="1", epsilon_grid="0.5" if grid else "0",
                                delta_grid=delta)
        self.config = new_study_config("s1", FEATS, privacy=privacy, n_tables=8, grid=grid)
        self.signed = sign_config(self.config, self.key)
        self.posts: list[bytes] = []
        self.status: list[int] = []
        self.remaining = "1000"  # epsilon the coordinator's ledger still allows
        self.me_status = 200

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/key":
            return httpx.Response(200, json={"key_id": key_fingerprint(self.key),
                                             "public_key_pem": public_key_pem(self.key)})
        if path.endswith("/config"):
            return httpx.Response(200, text=self.signed.model_dump_json())
        if path == "/v1/me":
            if self.me_status != 200:
                return httpx.Response(self.me_status, json={"detail": "credential revoked"})
            return httpx.Response(200, json={
                "participant": "h1",
                "epsilon_cap": "1000", "delta_cap": "0.5", "epsilon_remaining": self.remaining,
                "delta_remaining": "0.5", "epsilon_spent": "0", "delta_spent": "0"})
        self.posts.append(request.content)
        code = self.status.pop(0) if self.status else 201
        if code >= 400:
            return httpx.Response(code, json={"detail": "privacy budget exceeded" if code == 409
                                              else "unavailable"})
        return httpx.Response(code, json={"id": len(self.posts), "model_version": 1})


def agent_for(fake, tmp_path, cap="10", delta_cap="0", max_tries=3):
    agent = Agent(tmp_path / "state", transport=httpx.MockTransport(fake), sleep=lambda s: None,
                  max_tries=max_tries)
    agent.enrol("http://coord.test", "tok", key_fingerprint(fake.key), epsilon_cap=cap,
                delta_cap=delta_cap)
    return agent
