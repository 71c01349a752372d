"""Untrustworthy configs are refused before any noise is drawn, and nothing is charged."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx
import numpy as np
import pytest

from common.errors import ConfigDowngrade, ConfigError, ConfigExpired, SignatureInvalid
from common.study.config import StudyConfig
from common.study.signing import SignedConfig, generate_key, key_fingerprint, sign_config
from participant.agent import Agent, DataOptions
from participant.cli.main import exit_code

FEATURES = [{"name": n, "lo": 0.0, "hi": 1.0} for n in ("a", "b")]


class ConfigRewriter(httpx.HTTPTransport):
    """Real transport to the coordinator, rewriting the config answer once with ``rewrite``."""

    def __init__(self, rewrite) -> None:
        super().__init__()
        self.rewrite = rewrite
        self.posts = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.posts += request.method == "POST"
        if request.url.path.endswith("/config") and self.rewrite is not None:
            response.read()
            text, self.rewrite = self.rewrite(response.text), None
            return httpx.Response(response.status_code, text=text,
                                  headers={"Content-Type": "application/json"})
        return response


def one_byte(text: str) -> str:
    doc = json.loads(text)
    assert '"epsilon_lsh":"1"' in doc["payload"]
    doc["payload"] = doc["payload"].replace('"epsilon_lsh":"1"', '"epsilon_lsh":"2"')
    return json.dumps(doc)


def resign(text: str, key, **changes) -> str:
    config = StudyConfig.model_validate_json(SignedConfig.model_validate_json(text).payload)
    return sign_config(config.model_copy(update=changes), key).model_dump_json()


def other_key(text: str) -> str:
    return resign(text, generate_key())


def other_key_claiming_pinned_id(text: str) -> str:
    doc = json.loads(other_key(text))
    doc["key_id"] = json.loads(text)["key_id"]
    return json.dumps(doc)


CASES = {
    "tampered-one-byte": (lambda coord: one_byte, SignatureInvalid),
    "signed-by-another-key": (lambda coord: other_key, SignatureInvalid),
    "another-key-claiming-pinned-id": (lambda coord: other_key_claiming_pinned_id,
                                       SignatureInvalid),
    "expired": (lambda coord: lambda t: resign(
        t, coord.signing_key(), issued_at=datetime.now(UTC) - timedelta(days=9),
        expires_at=datetime.now(UTC) - timedelta(days=1)), ConfigExpired),
    "older-than-seen": (None, ConfigDowngrade),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_config_is_refused_and_nothing_is_released(participant_coordinator, tmp_path, case):
    coord = participant_coordinator
    name, study = f"hospital-{case}", f"cfg-{case}"
    token = coord.new_participant(name, "50")
    coord.new_study(study, FEATURES, members=[name], lsh={"n_tables": 10},
                    privacy={"epsilon_lsh": "1"})
    data = tmp_path / "d.csv"
    np.savetxt(data, np.random.default_rng(0).uniform(0, 1, (200, 2)), delimiter=",",
               header="a,b", comments="")
    make, error = CASES[case]
    state = tmp_path / "state"
    Agent(state).enrol(coord.url, token, coord.fingerprint(), epsilon_cap="10")
    if case == "older-than-seen":  # the agent has seen v5 (genuinely signed) before
        newer = ConfigRewriter(lambda t: resign(t, coord.signing_key(), version=5))
        Agent(state, transport=newer).fetch_config(study)
        rewriter = ConfigRewriter(None)
    else:
        rewriter = ConfigRewriter(make(coord))
    agent = Agent(state, transport=rewriter)

    with pytest.raises(error) as info:
        agent.contribute(study, data, DataOptions(), send_slot=0)
    assert isinstance(info.value, ConfigError) and exit_code(info.value) == 4
    assert rewriter.posts == 0
    assert list((state / "outbox").iterdir()) == []
    with agent.ledger() as ledger:
        assert ledger.entries() == [] and ledger.spent().epsilon == 0
    budget = coord.budget(name)
    assert budget["epsilon_spent"] == "0" and budget["entries"] == []


def test_enrol_refuses_a_key_that_does_not_match_the_pin(participant_coordinator, tmp_path):
    wrong = key_fingerprint(generate_key())
    with pytest.raises(SignatureInvalid, match="not the pinned"):
        Agent(tmp_path / "s").enrol(participant_coordinator.url, "t", wrong, epsilon_cap="1")
    assert not (tmp_path / "s" / "participant.json").exists()
