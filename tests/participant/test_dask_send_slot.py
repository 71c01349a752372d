"""On the Dask engine a release's LocalCluster is started before its send slot begins (the
slot is anchored when the config is fetched), so the cluster's start-up never pushes the
release into a later slot, which would hint at the data size."""

from __future__ import annotations

import httpx
import pytest
from release_kit import FakeCoordinator

from common.study.signing import key_fingerprint
from participant.agent import Agent, DataOptions
from participant.dask import engine as engine_dask

pytestmark = pytest.mark.slow


def test_the_local_cluster_starts_before_the_slot_and_serves_check_and_counts(
        tmp_path, monkeypatch):
    data = tmp_path / "d.csv"
    data.write_text("a,b,c\n" + "".join(f"0.{i % 9},0.{(i * 7) % 9},0.5\n" for i in range(80)))
    fake = FakeCoordinator()
    events: list[str] = []
    real = engine_dask.local_cluster

    def recording_cluster(**kw):
        events.append("cluster start")
        return real(n_workers=1, security=False, **kw)

    monkeypatch.setattr(engine_dask, "local_cluster", recording_cluster)
    ticks = iter(range(1_000_000))

    def clock() -> float:  # the agent's clock: each reading is one event
        events.append("clock")
        return float(next(ticks))

    agent = Agent(tmp_path / "state", transport=httpx.MockTransport(fake), sleep=lambda s: None,
                  clock=clock)
    agent.enrol("http://coord.test", "tok", key_fingerprint(fake.key), epsilon_cap="5")
    events.clear()
    outcome = agent.contribute("s1", data, DataOptions(engine="dask"), send_slot=30.0)
    assert events.count("cluster start") == 1  # one cluster for the check and the counts
    assert events.index("cluster start") < events.index("clock")  # before the slot's anchor
    assert outcome.send_slots == 1 and len(fake.posts) == 1
