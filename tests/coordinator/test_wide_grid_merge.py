"""A sparse grid far beyond 64 bits of cells through the API: multi-word keys are validated,
merged across participants and served back."""

from __future__ import annotations

import base64
import hashlib
import zlib

import numpy as np
from coordinator_kit import ADMIN

from common.histograms.cellkeys import ints_from_keys, keys_from_ints
from common.study.config import StudyConfig
from common.wire.encoding import EncodedCounts, decode_counts, encode_counts


def test_wide_sparse_grid_merges_across_participants(client, make_participant, make_study,
                                                    coord_kit, rng):
    members = [make_participant(f"w{i}", epsilon_cap="5", delta_cap="0.001") for i in range(2)]
    signed = make_study("wide", members=members, n_features=64, grid={"bins": 4},
                        epsilon_grid="0.25", delta_grid="1e-6")
    config = coord_kit.config_of(signed)
    assert config.grid_cells == 4**64 and config.grid_layout == "sparse"
    top = config.grid_cells - 1
    cells = [[0, 2**40, top], [2**40, 2**100, top]]
    for member, own in zip(members, cells, strict=True):
        grid = encode_counts(np.array([105, 107, 109]), indices=keys_from_ints(own, 3),
                             n_cells=config.grid_cells)
        body, _, _ = coord_kit.release(signed, rng, grid=grid.model_dump(mode="json"))
        r = client.post("/v1/studies/wide/contributions", json=body, headers=member.headers)
        assert r.status_code == 201, r.text
    model = client.get("/v1/studies/wide/model", headers=ADMIN).json()
    keys, values = decode_counts(EncodedCounts.model_validate(model["grid"]),
                                 expected_cells=StudyConfig.model_validate_json(
                                     signed["payload"]).grid_cells)
    assert keys is not None and ints_from_keys(keys) == [0, 2**40, 2**100, top]
    assert values.tolist() == [105, 107 + 105, 107, 109 + 109]  # kept values are >= T


def test_wide_key_beyond_the_grid_is_refused(client, make_participant, make_study, coord_kit,
                                             rng):
    member = make_participant("w9", epsilon_cap="5", delta_cap="0.001")
    signed = make_study("wide2", members=[member], n_features=40, grid={"bins": 4},
                        epsilon_grid="0.25", delta_grid="1e-6")
    config = coord_kit.config_of(signed)
    words = keys_from_ints([config.grid_cells], 2)  # one past the last cell (4**40)
    grid = encode_counts(np.array([1]), indices=keys_from_ints([0], 2), n_cells=config.grid_cells)
    doc = grid.model_dump(mode="json")
    raw = words.astype("<i8").tobytes() + np.array([1], dtype="<i4").tobytes()
    doc.update(data=base64.b64encode(zlib.compress(raw)).decode(),
               sha256=hashlib.sha256(raw).hexdigest())
    body, _, _ = coord_kit.release(signed, rng, grid=doc)
    r = client.post("/v1/studies/wide2/contributions", json=body, headers=member.headers)
    assert r.status_code == 422 and "strictly increasing within" in r.json()["detail"]
