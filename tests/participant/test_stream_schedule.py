"""The stream's public schedule (participant side, coordinator faked): what the coordinator
sees is the schedule whatever the stream's length, records beyond a window's slots are not
learnt from, the cap stops before a window is opened, and a re-signed config is picked up
only when its online section is unchanged."""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import httpx
import numpy as np
import pytest

from common.budget import PrivacyBudget
from common.config import FeatureSpec, PrivacyParams, new_study_config
from common.online import OnlineParams
from common.online.wire import encode_vector
from participant.client import CoordinatorBudget, CoordinatorClient, CoordinatorRefused
from participant.online.charge import StreamCapReached, StreamConfigChanged
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


def transcript(posts: list[dict]) -> tuple:
    """What the schedule fixes: windows, claims and order of the releases."""
    return tuple((p["window"], p["epsilon"], p["delta"], p["config_version"]) for p in posts)


def test_coordinator_transcript_does_not_depend_on_the_stream_length(tmp_path):
    """Streams of 0, 7, 20 and 33 records in window 0 (20 slots), then an empty window 1:
    the number, order, windows and claims of the releases are the same in every run, and the
    queried-slot counts follow the same Binomial(20, p) whatever the length (zero weights:
    a real record and an empty slot are queried alike; with trained weights the counts differ
    by what the private query decisions allow, nothing more)."""
    runs = 60
    seen: dict[int, Counter] = {}
    counts: dict[int, list[int]] = {}
    for length in (0, 7, 20, 33):
        seen[length], counts[length] = Counter(), []
        for k in range(runs):
            run = Run(tmp_path / f"{length}-{k}")
            run.feed(length)
            run.to(1)
            run.to(2)
            seen[length][transcript(run.coordinator.posts)] += 1
            counts[length] += [p["count"] for p in run.coordinator.posts]
            assert len(run.ledger.entries()) == 3  # windows 0, 1 and the open 2: charged
            run.close()
    cost = ONLINE.epoch_cost()
    claim = (str(cost.epsilon.normalize()), str(cost.delta.normalize()), 1)
    expected = Counter({((0, *claim), (1, *claim)): runs})
    assert all(seen[length] == expected for length in seen), seen
    mean, sd = SLOTS * P, (SLOTS * P * (1 - P) / (2 * runs)) ** 0.5
    for length, values in counts.items():
        assert abs(np.mean(values) - mean) < 4.5 * sd, (length, np.mean(values))


def test_records_beyond_the_slots_are_scored_but_not_learnt(tmp_path):
    run = Run(tmp_path)
    run.feed(SLOTS + 5)
    rows = run.store._db.execute("SELECT slot, queried FROM records ORDER BY seq").fetchall()
    assert [s for s, _ in rows] == [*range(SLOTS), *[None] * 5]
    assert all(q == 0 for s, q in rows if s is None)
    assert run.store.counts()["beyond_slots"] == 5
    run.to(1)
    [post] = run.coordinator.posts
    assert post["window"] == 0 and post["count"] == sum(q for _, q in rows)  # no padding
    run.close()


def test_unanswered_queries_are_resolved_when_their_window_closes(tmp_path):
    run = Run(tmp_path)
    run.feed(SLOTS)
    queried = [r for (r,) in run.store._db.execute("SELECT id FROM records WHERE queried=1")]
    assert queried, "p = 0.5 over 20 slots"
    assert run.streamer.label(queried[0], 1)
    run.to(1)
    assert run.store.n_awaiting() == 0
    assert not run.streamer.label(queried[-1], -1)  # too late: its window is released
    assert run.store.counts()["labelled"] == 1
    run.close()


def test_cap_stops_before_a_window_is_opened(tmp_path):
    cost = ONLINE.epoch_cost()
    run = Run(tmp_path, cap=str(cost.epsilon * 2))
    run.feed(5)
    run.to(1)  # window 0 released, window 1 charged: the cap is spent
    with pytest.raises(StreamCapReached, match="schedule window 2"):
        run.to(2)
    assert [p["window"] for p in run.coordinator.posts] == [0, 1]  # window 1 closed first
    assert run.store.window() == (1, 1, 0) and len(run.ledger.entries()) == 2
    run.close()


def test_a_restart_charges_no_window_twice(tmp_path):
    first = Run(tmp_path)
    first.feed(5)
    first.close()
    again = Run(tmp_path)  # the same files: window 0 is open and charged
    again.feed(5, start=5)
    again.to(1)
    assert len(again.ledger.entries()) == 2 and again.store.counts()["records"] == 10
    assert [p["window"] for p in again.coordinator.posts] == [0]
    again.close()


def test_a_resigned_config_is_picked_up_when_the_online_section_is_unchanged(tmp_path):
    coordinator = FakeCoordinator(refuse_config=1)
    run = Run(tmp_path, coordinator=coordinator, refetch=lambda: (study(2), "e" * 64))
    run.feed(3)
    run.to(1)
    [post] = coordinator.posts
    assert (post["config_version"], post["config_digest"], post["window"]) == (2, "e" * 64, 0)
    [(key, body)] = run.store._db.execute("SELECT key, body FROM releases").fetchall()
    assert post["idempotency_key"] == key and json.loads(body) == post  # same noisy bytes
    run.close()


def test_a_resigned_config_with_another_online_section_stops_the_stream(tmp_path):
    changed = study(2, ONLINE.model_copy(update={"window_slots": 40}))
    run = Run(tmp_path, coordinator=FakeCoordinator(refuse_config=1),
              refetch=lambda: (changed, "e" * 64))
    run.feed(3)
    with pytest.raises(StreamConfigChanged, match="different online section"):
        run.to(1)
    assert run.store.stored_releases()  # kept, not re-wrapped
    run.close()
