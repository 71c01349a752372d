"""The cohort columns of a score file, from the study's released cohort model only."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from common.cohorts.model import CohortModel
from participant import layout


@dataclass(frozen=True)
class Cohorts:
    """A released cohort model and the study's feature names (for rule text)."""

    model: CohortModel
    names: list[str]

    def columns(self, X: NDArray[np.float64]) -> dict[str, NDArray[Any]]:
        """``cohort`` (nearest released centre), ``cohort_distance`` (public unit box) and,
        when the model has rule paths (the DPM tree), ``cohort_rule`` as text."""
        index, distance = self.model.assign(X)
        cols: dict[str, NDArray[Any]] = {"cohort": index.astype(np.int64),
                                         "cohort_distance": distance}
        if self.model.rules:
            rules = [self.model.describe(i, self.names) for i in range(self.model.k)]
            cols["cohort_rule"] = np.array(rules, dtype=object)[index]
        return cols


def saved_model(study_dir: Path) -> CohortModel | None:
    """The released cohort model saved by ``fedod-participant cohorts``, if any."""
    path = study_dir / layout.COHORT_MODEL
    return CohortModel.from_json(path.read_text()) if path.exists() else None


def model_from_doc(doc: dict[str, object]) -> CohortModel | None:
    """The model inside a ``GET /v1/studies/{id}/cohorts`` answer once the run is done."""
    model = doc.get("model")
    return CohortModel.from_json(json.dumps(model)) if doc.get("status") == "done" else None


def fetch_cohorts(study_dir: Path, client: Any, config: Any) -> Cohorts | None:
    """The study's released cohort model (asked of the coordinator, saved for later), or
    None when the study has no cohorts or the run has not finished."""
    if config.cohorts is None:
        return None
    doc = client.get_cohorts(config.study_id)
    model = model_from_doc(doc)
    if model is not None:
        from participant.state import write_private

        write_private(study_dir / layout.COHORT_MODEL, model.to_json().encode())
    else:
        model = saved_model(study_dir)
    return None if model is None else Cohorts(model, [f.name for f in config.features])
