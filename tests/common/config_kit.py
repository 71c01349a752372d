"""Study configs for the config tests: a fixed clock, a four-feature schema, a config builder
and its JSON document (shared by test_config and test_delta_floor)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from common.study.config import (
    FeatureSpec,
    PrivacyParams,
    StudyConfig,
    canonical_json,
    new_study_config,
)

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
FEATURES = [FeatureSpec(name=f"x{i}", lo=0.0, hi=float(i + 1)) for i in range(4)]


def make(**kw: Any) -> StudyConfig:
    args: dict[str, Any] = {
        "privacy": PrivacyParams(epsilon_lsh="0.5"),
        "n_tables": 20,
        "seed": bytes(range(32)),
        "now": NOW,
    }
    args.update(kw)
    return new_study_config("study-1", FEATURES, **args)


def doc(config: StudyConfig) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(canonical_json(config))
    return out


def grid_doc(grid: dict[str, Any], eps: str = "1", delta: str = "0") -> dict[str, Any]:
    d = doc(make())
    d["grid"] = grid
    d["privacy"].update(epsilon_grid=eps, delta_grid=delta)
    return d
