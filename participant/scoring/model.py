"""Fetch the global model (ETag-cached in the state dir) and build detectors from it."""

from __future__ import annotations

import sys
from typing import Any

from common.detectors import GridKNN, LSHiTables
from common.errors import ConfigVersionConflict, CoordinatorUnavailable, NotFound
from common.study.config import StudyConfig
from common.wire.encoding import decode_counts, to_dense
from common.wire.schemas import ModelPublic
from participant import layout
from participant.client import CoordinatorClient
from participant.state import StateDir, write_private


def fetch_model(
    state: StateDir, client: CoordinatorClient, study: str, config: StudyConfig
) -> ModelPublic:
    """Get the model, sending ``If-None-Match`` with the cached ETag; fall back to the cache
    (with a warning) only when the coordinator is unreachable."""
    folder = state.study_dir(study)
    cache, etag_file = folder / layout.MODEL, folder / layout.MODEL_ETAG
    etag = etag_file.read_text() if cache.exists() and etag_file.exists() else None
    try:
        text, new_etag = client.get_model(study, etag)
    except CoordinatorUnavailable:
        if not cache.exists():
            raise
        print(f"warning: coordinator unreachable, scoring with the cached model {etag}",
              file=sys.stderr)
        text, new_etag = None, etag
    if text is None:
        text = cache.read_text()
    else:
        write_private(cache, text.encode())
        if new_etag:
            write_private(etag_file, new_etag.encode())
    model = ModelPublic.model_validate_json(text)
    if model.config_version != config.version:
        raise ConfigVersionConflict(
            f"the global model was built under config v{model.config_version}, the current "
            f"config is v{config.version}; wait until participants contribute under it",
            model_version=model.config_version,
            config_version=config.version,
        )
    if model.contributors == 0:
        raise NotFound(f"study {study} has no contributions yet; nothing to score against")
    return model


def model_detectors(config: StudyConfig, model: ModelPublic) -> dict[str, Any]:
    """LSH iTables (and grid k-NN if the study has a grid) from the merged histograms."""
    family = config.lsh_family()
    idx, values = decode_counts(model.lsh, expected_cells=family.n_cells)
    lsh_counts = to_dense(idx, values, family.n_cells)
    scoring = config.lsh.scoring or "mass"
    detectors: dict[str, Any] = {"lsh": LSHiTables.from_histogram(family, lsh_counts,
                                                                  scoring=scoring)}
    if config.grid is not None and model.grid is not None:
        spec = config.grid_spec()
        assert spec is not None
        gidx, gvalues = decode_counts(model.grid, expected_cells=config.grid_cells)
        counts = gvalues if gidx is None else (gidx, gvalues)
        detectors["grid"] = GridKNN.from_counts(
            spec, counts, k=config.grid.k, max_depth=config.grid.max_depth,
            weighted=config.grid.weighted,
        )
    return detectors
