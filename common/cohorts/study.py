"""The round protocol a study's signed cohort parameters name (k-means or the DPM tree)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from common.cohorts.dpm_plan import DPMPlan
from common.cohorts.dpm_protocol import DPMProtocol
from common.cohorts.mechanism import DEFAULT_MAX_RECORDS
from common.cohorts.params import CohortParams
from common.cohorts.plan import KMeansPlan
from common.cohorts.protocol import KMeansProtocol, RoundProtocol
from common.secagg.params import AggregationParams
from common.study.params import LSHParams

__all__ = ["CohortStudy", "protocol_for", "protocol_of"]


class CohortStudy(Protocol):
    """What a cohort run reads of its study: :class:`common.study.config.StudyConfig` has all of it
    (stated here so that this package needs only the parameter sections, not the config that
    assembles them)."""

    study_id: str
    cohorts: CohortParams | None
    aggregation: AggregationParams | None
    lsh: LSHParams

    @property
    def lo(self) -> Sequence[float]: ...
    @property
    def hi(self) -> Sequence[float]: ...


def protocol_of(config: CohortStudy) -> RoundProtocol:
    """The protocol of a study config: its cohort section, box, seed and record bound
    (``aggregation.max_records``, or its default when the config has no aggregation
    section). ``ValueError`` for a study without cohorts."""
    if config.cohorts is None:
        raise ValueError(f"study {config.study_id!r} has no cohorts section")
    records = (config.aggregation or AggregationParams()).max_records
    return protocol_for(config.cohorts, config.lo, config.hi, bytes.fromhex(config.lsh.seed),
                        max_records=records)


def protocol_for(params: CohortParams, lo: Sequence[float], hi: Sequence[float],
                 seed: bytes, *, max_records: int = DEFAULT_MAX_RECORDS) -> RoundProtocol:
    """The protocol of a study's signed cohort parameters (public box and seed) with the
    public per-participant record bound ``max_records``."""
    if params.method == "kmeans":
        assert params.k is not None  # CohortParams requires it for k-means
        plan = KMeansPlan(np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64),
                          k=params.k, epsilon=params.epsilon, over=params.over,
                          rounds=params.rounds, count_share=params.count_share,
                          resolution_bits=params.resolution_bits, schedule=params.schedule,
                          sum_noise=params.sum_noise, declared_n=params.declared_n)
        return KMeansProtocol(plan, seed, params.prune, max_records)
    box = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    dims = params.dims_per_node
    return DPMProtocol(DPMPlan(*box, epsilon=params.epsilon, depth=params.depth,
                               bins=params.bins,
                               dims_per_node=None if dims is None else min(dims, len(lo)),
                               leaf_share=params.leaf_share, count_share=params.count_share,
                               min_size=params.min_size, leaf_noise=params.leaf_noise,
                               declared_n=params.declared_n), seed, max_records)
