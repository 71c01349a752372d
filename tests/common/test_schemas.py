"""Wire models: strict inputs, epsilon as strings, self-describing OpenAPI."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel, ValidationError

from common.wire import schemas
from common.wire.encoding import encode_counts

COUNTS = encode_counts(np.arange(8), n_cells=8).model_dump(mode="json")
CONTRIBUTION: dict[str, Any] = {
    "idempotency_key": "h1-study-1-v1-0001",
    "config_version": 1,
    "config_digest": "a" * 64,
    "epsilon": "0.5",
    "delta": "0",
    "lsh": COUNTS,
}
STUDY: dict[str, Any] = {
    "study_id": "breastw",
    "features": [{"name": "a", "lo": 0, "hi": 1}, {"name": "b", "lo": -1.5, "hi": 2}],
    "lsh": {"n_tables": 50},
    "privacy": {"epsilon_lsh": "1"},
}


def test_contribution_round_trip() -> None:
    c = schemas.ContributionCreate.model_validate_json(json.dumps(CONTRIBUTION))
    out = json.loads(c.model_dump_json())
    assert out["epsilon"] == "0.5" and out["delta"] == "0" and out["grid"] is None


def test_study_create_defaults() -> None:
    s = schemas.StudyCreate.model_validate_json(json.dumps(STUDY))
    assert s.lsh.sample_size == 16 and s.valid_days == 365 and s.grid is None


@pytest.mark.parametrize(
    ("model", "base", "patch", "match"),
    [
        (schemas.ContributionCreate, CONTRIBUTION, {"epsilon": 0.5}, "not a float"),
        (schemas.ContributionCreate, CONTRIBUTION, {"epsilon": "-1"}, ">= 0"),
        (schemas.ContributionCreate, CONTRIBUTION, {"idempotency_key": "short"}, "at least 16"),
        (schemas.ContributionCreate, CONTRIBUTION, {"idempotency_key": "x" * 15 + "/"}, "pattern"),
        (schemas.ContributionCreate, CONTRIBUTION, {"config_version": 1.0}, "valid integer"),
        (schemas.ContributionCreate, CONTRIBUTION, {"config_digest": "A" * 64}, "pattern"),
        (schemas.ContributionCreate, CONTRIBUTION, {"extra": True}, "Extra inputs"),
        (schemas.ContributionCreate, CONTRIBUTION, {"lsh": {**COUNTS, "n_cells": 1e3}}, "int"),
        (schemas.StudyCreate, STUDY, {"study_id": "../etc"}, "pattern"),
        (schemas.StudyCreate, STUDY, {"valid_days": 0}, "greater than or equal"),
        (schemas.StudyCreate, STUDY, {"lsh": {"n_tables": 5000}}, "less than or equal"),
        (schemas.StudyCreate, STUDY, {"lsh": {"seed": "00"}}, "Extra inputs"),
        (schemas.StudyCreate, STUDY, {"features": []}, "at least 1"),
        (schemas.ParticipantCreate, {"name": "h1"}, {"epsilon_cap": 1.0}, "not a float"),
        (schemas.ParticipantCreate, {"name": "h1"}, {"epsilon_cap": "1", "delta_cap": "0.5"}, "<"),
        (schemas.ParticipantCreate, {"epsilon_cap": "1"}, {"name": "a b"}, "pattern"),
        (schemas.ParticipantUpdate, {}, {"epsilon_cap": "inf"}, "finite"),
        (schemas.MemberAdd, {}, {"participant": ""}, "pattern"),
    ],
)
def test_inputs_are_strict(
    model: type[BaseModel], base: dict[str, Any], patch: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValidationError, match=match):
        model.model_validate_json(json.dumps(base | patch))


def test_openapi_is_self_describing() -> None:
    schema = schemas.ContributionCreate.model_json_schema()
    props = schema["properties"]
    assert props["epsilon"]["type"] == "string"
    assert all("description" in p for p in props.values())
    assert schema["additionalProperties"] is False
    budget = schemas.BudgetPublic.model_json_schema(mode="serialization")
    assert budget["properties"]["epsilon_remaining"]["type"] == "string"


def test_budget_public_serialises_strings() -> None:
    b = schemas.BudgetPublic(
        participant="h1",
        active=True,
        epsilon_cap="10",
        delta_cap="1e-6",
        epsilon_spent="2.5",
        delta_spent="0",
        epsilon_remaining="7.5",
        delta_remaining="1e-6",
    )
    out = json.loads(b.model_dump_json())
    assert out["delta_cap"] == "0.000001" and out["epsilon_remaining"] == "7.5"
