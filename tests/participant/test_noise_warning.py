"""The participant says, from the public config only, when the study's model is noise.

The signed config gains its ``aggregation`` block on the secure-aggregation branch; until
then the declared cohort is handed to the same check the agent calls.
"""

from __future__ import annotations

import logging

import pytest
from release_kit import FakeCoordinator, agent_for

import participant.agent
from common.noise.planning import config_noise_warning
from common.secagg.params import AggregationParams


@pytest.mark.parametrize(("records", "expected"), [(2, "dominated by noise"), (10_000, None)])
def test_fetch_config_logs_the_noise_warning(monkeypatch, tmp_path, caplog, records, expected):
    declared = AggregationParams(cohort_size=10, expected_records=records)
    seen = []

    def check(config):
        seen.append(config)
        return config_noise_warning(config, declared)

    monkeypatch.setattr(participant.agent, "config_noise_warning", check)
    fake = FakeCoordinator()
    agent = agent_for(fake, tmp_path)
    with caplog.at_level(logging.WARNING, logger="fedod.participant"):
        config, _ = agent.fetch_config("s1")
    assert seen == [config]  # the verified config, nothing of the data
    warnings = [r.getMessage() for r in caplog.records if r.name == "fedod.participant"]
    if expected is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and expected in warnings[0] and "study s1" in warnings[0]
