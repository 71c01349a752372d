"""A participant's stream on fresh files with the coordinator faked, for the stream tests: the
study, a coordinator that records every gradient release, a Streamer driven by clock ticks,
and an exact stand-in for the Gaussian."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import httpx
import numpy as np

from common.budget import PrivacyBudget
from common.online import OnlineParams
from common.online.wire import encode_vector
from common.study.config import FeatureSpec, PrivacyParams, new_study_config
from participant.client import CoordinatorBudget, CoordinatorClient, CoordinatorRefused
from participant.online.engine import Streamer
from participant.online.store import StreamStore
from participant.release.ledger import Ledger

FEATURES = [FeatureSpec(name=n, lo=0.0, hi=1.0) for n in ("a", "b")]
SLOTS, P = 20, 0.5
ONLINE = OnlineParams(dim=3, window_slots=SLOTS, window_seconds=60, p=P)


def study(version: int = 1, online: OnlineParams = ONLINE):
    return new_study_config("s", FEATURES, privacy=PrivacyParams(epsilon_lsh=Decimal(1)),
                            n_tables=3, online=online, seed=bytes(32), version=version)


class FakeCoordinator:
    """Records every gradient release; serves all-zero weights (version 0)."""

    def __init__(self, refuse_config: int = 0) -> None:
        self.posts: list[dict] = []
        self.refuse_config = refuse_config  # refuse this many POSTs as a stale config

    def budget(self) -> CoordinatorBudget:
        big = PrivacyBudget(1000, Decimal("0.5"))
        return CoordinatorBudget(big, PrivacyBudget.zero(), big)

    post_online_gradient = CoordinatorClient.post_online_gradient  # through request below
    get_online_model = CoordinatorClient.get_online_model

    def request(self, method: str, path: str, *, content: bytes | None = None,
                **_: object) -> httpx.Response:
        if method == "POST":
            if self.refuse_config:
                self.refuse_config -= 1
                raise CoordinatorRefused("stale", status=409, detail="config version 1 is "
                                         "not the current version 2 of study 's'")
            self.posts.append(json.loads(content or b"{}"))
            return httpx.Response(201, json={})
        zeros = encode_vector(np.zeros(3))
        return httpx.Response(200, json={"version": 0, "weights": zeros, "average": zeros})


class Run:
    """A Streamer on fresh files, its clock driven by ticks."""

    def __init__(self, root: Path, cap: str = "100", coordinator: FakeCoordinator | None = None,
                 refetch=None, online: OnlineParams = ONLINE) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.tick = 0
        self.coordinator = coordinator or FakeCoordinator()
        self.store = StreamStore(root / "stream.sqlite3", 3)
        self.ledger = Ledger(root / "ledger.sqlite3")
        self.streamer = Streamer(study(online=online), "d" * 64, self.store, self.ledger,
                                 self.coordinator, PrivacyBudget(cap, Decimal("0.5")), {},
                                 lambda: self.tick, refetch)
        self.streamer.resume()

    def feed(self, n: int, start: int = 0) -> None:
        rng = np.random.default_rng(start)
        for i in range(start, start + n):
            self.streamer.consume(f"r{i}", rng.uniform(0, 1, size=2))

    def to(self, window: int) -> None:
        self.tick = window
        self.streamer.advance()

    def close(self) -> None:
        self.store.close()
        self.ledger.close()


class Exact:
    """Stands in for the Gaussian: records each sum it is asked to release, adds nothing."""

    def __init__(self) -> None:
        self.calls: list[np.ndarray] = []

    def release(self, total: np.ndarray) -> np.ndarray:
        self.calls.append(np.array(total))
        return np.array(total)
