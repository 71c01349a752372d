"""Private cohort profiles (docs/COHORTS.md).

- :mod:`common.cohorts.kmeans`: federated DP k-means with cluster fusion (DP-KCCM) as pure
  functions over what participants release: seed-derived initial centroids, one
  participant's clipped round statistics and their noisy release, the coordinator's update,
  and the fusion of ``n * k`` centroids down to ``k``.
- :mod:`common.cohorts.plan`: the public study parameters and the exact budget split.
- :mod:`common.cohorts.dpm`: the federated DPM cohort tree as round functions (participant
  histograms and their release, the coordinator's split and leaf profiles);
  :mod:`common.cohorts.dpm_plan` its public parameters, budget split and JSON tree state.
- :mod:`common.cohorts.params`: the signed ``cohorts`` section of a study config.
- :mod:`common.cohorts.protocol`: the round protocol the coordinator and participants run.

The names below load their module (and OpenDP with it) on first use only: the signed config
imports :mod:`common.cohorts.params` and must not pay OpenDP's import.
"""

from importlib import import_module
from typing import Any

_KMEANS = ("KMeansPlan", "RoundRelease", "RoundStatistics", "count_floor", "fit_federated",
           "fuse_centroids", "initial_centroids", "release_round", "round_statistics",
           "split_epsilon", "update_centroids")
_DPM = ("LeafStatistics", "advance", "finish", "leaf_statistics", "level_statistics",
        "release_leaves", "release_level")
_DPM_PLAN = ("DPMBudget", "DPMPlan", "Leaf", "TreeState", "tree_state")
_WHERE: dict[str, tuple[str, str]] = {
    **{n: ("common.cohorts.kmeans", n) for n in _KMEANS},
    **{n: ("common.cohorts.dpm", n) for n in _DPM},
    **{n: ("common.cohorts.dpm_plan", n) for n in _DPM_PLAN},
    "fit_dpm": ("common.cohorts.dpm", "fit_federated"),
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    """Load the module that defines ``name`` on first use."""
    if name in _WHERE:
        module, attr = _WHERE[name]
        return getattr(import_module(module), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
