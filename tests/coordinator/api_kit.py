"""Helpers of the coordinator API tests: the merged LSH model a response carries, every stored
row (to prove a refusal changed nothing), and cohort round bodies."""

from __future__ import annotations

import base64
import hashlib
import zlib

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from common.cohorts.protocol import CohortState
from common.cohorts.study import protocol_for
from coordinator.db.tables import Base

COHORTS = {"method": "kmeans", "k": 2, "over": 2, "rounds": 2, "epsilon": "2"}


def model_lsh(model: dict) -> np.ndarray:
    data = zlib.decompress(base64.b64decode(model["lsh"]["data"]))
    assert hashlib.sha256(data).hexdigest() == model["lsh"]["sha256"]
    return np.frombuffer(data, dtype=np.dtype(model["lsh"]["dtype"]))


def table_rows(app) -> dict[str, list]:
    """Every row of every table: ledgers, contributions, releases, rounds, results."""
    with Session(app.state.engine) as s:
        return {t.name: sorted(map(repr, s.execute(select(t)).all()))
                for t in Base.metadata.sorted_tables}


def cohort_protocol(config):
    return protocol_for(config.cohorts, config.lo, config.hi, bytes.fromhex(config.lsh.seed))


def cohort_body(config, values, number, key=None, state=None, **override):
    cost = cohort_protocol(config).cost(state or CohortState(number - 1, {}))
    return {"idempotency_key": key or f"k-{number}", "config_version": config.version,
            "epsilon": format(cost.epsilon.normalize(), "f"),
            "delta": format(cost.delta.normalize(), "f"),
            "values": [int(v) for v in values], **override}
