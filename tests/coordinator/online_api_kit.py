"""Online gradient releases through the coordinator API, for its tests: the study's online
section and route, a study with members, and a release body."""

from __future__ import annotations

from coordinator_kit import ADMIN

from common.online import OnlineParams
from common.online.wire import encode_vector
from common.study.signing import SignedConfig

ONLINE = {"dim": 4, "batch": 5, "step_releases": 2, "lam": 0.1, "window_seconds": 60,
          "algorithm": "flmb"}
"""Window 0 ended in 1970: every small window index is in the past."""
URL = "/v1/studies/s1/online/gradients"


def create_study(client, coord_kit, members, online: dict) -> dict:
    """Study ``s1`` with this ``online`` section and both members; its signed config."""
    spec = {**coord_kit.study_spec("s1"), "online": online}
    r = client.post("/v1/studies", json=spec, headers=ADMIN)
    assert r.status_code == 201, r.text
    for m in members:
        client.post("/v1/studies/s1/members", json={"participant": m.name}, headers=ADMIN)
    return r.json()["config"]


def body(signed, key: str, noisy_sum, count: int, window: int = 0,
         online: dict = ONLINE) -> dict:
    claim = OnlineParams(**online).epoch_cost()
    return {"idempotency_key": key * 16, "config_version": 1,
            "config_digest": SignedConfig.model_validate(signed).digest(),
            "weights_version": 0, "window": window, "count": count,
            "noisy_sum": encode_vector(noisy_sum), "epsilon": str(claim.epsilon),
            "delta": str(claim.delta)}
