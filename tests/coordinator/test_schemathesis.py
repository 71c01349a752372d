"""Property-based fuzzing of the OpenAPI schema: no input may produce a 5xx."""

from __future__ import annotations

from collections import Counter

import pytest
import schemathesis
from coordinator_kit import ADMIN_TOKEN
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

pytestmark = [
    pytest.mark.slow,
    pytest.mark.parametrize("db_url", ["sqlite"], indirect=True),  # fuzz once, on SQLite
]


@pytest.fixture
def seeded(client, make_participant, make_study):
    """An app with one study and one member, so fuzzed requests reach deep code paths."""
    member = make_participant("h1")
    make_study("s1", members=[member])
    return member


PARTICIPANT_PATHS = ("/v1/me", "/v1/studies/{study_id}/contributions")


def test_no_server_errors(app, seeded):
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 14

    statuses: Counter[int] = Counter()
    for operation in operations:
        token = seeded.token if operation.path in PARTICIPANT_PATHS else ADMIN_TOKEN
        fuzz(operation, token, statuses)
    assert sum(statuses.values()) > 100 and statuses[200] and statuses[422], statuses


def fuzz(operation, token, statuses):
    """Run generated cases of one operation; any 5xx fails."""

    @given(case=operation.as_strategy())
    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    def check(case):
        if "study_id" in (case.path_parameters or {}) and case.method != "GET":
            case.path_parameters["study_id"] = "s1"
        response = case.call_and_validate(
            headers={"Authorization": f"Bearer {token}"}, checks=[not_a_server_error]
        )
        statuses[response.status_code] += 1

    check()
