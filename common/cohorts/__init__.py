"""Private cohort profiles (issue 9).

- :mod:`common.cohorts.kmeans`: federated DP k-means with cluster fusion (DP-KCCM) as pure
  functions over what participants release: seed-derived initial centroids, one
  participant's clipped round statistics and their noisy release, the coordinator's update,
  and the fusion of ``n * k`` centroids down to ``k``.
- :mod:`common.cohorts.plan`: the public study parameters and the exact budget split.
- :mod:`common.cohorts.dpm`: the federated DPM cohort tree as round functions (participant
  histograms and their release, the coordinator's split and leaf profiles);
  :mod:`common.cohorts.dpm_plan` its public parameters, budget split and JSON tree state.
"""

from common.cohorts.dpm import (
    LeafStatistics,
    advance,
    finish,
    leaf_statistics,
    level_statistics,
    release_leaves,
    release_level,
)
from common.cohorts.dpm import fit_federated as fit_dpm
from common.cohorts.dpm_plan import DPMBudget, DPMPlan, Leaf, TreeState, tree_state
from common.cohorts.kmeans import (
    KMeansPlan,
    RoundRelease,
    RoundStatistics,
    count_floor,
    fit_federated,
    fuse_centroids,
    initial_centroids,
    release_round,
    round_statistics,
    split_epsilon,
    update_centroids,
)

__all__ = [
    "DPMBudget",
    "DPMPlan",
    "Leaf",
    "LeafStatistics",
    "TreeState",
    "advance",
    "finish",
    "fit_dpm",
    "leaf_statistics",
    "level_statistics",
    "release_leaves",
    "release_level",
    "tree_state",
    "KMeansPlan",
    "RoundRelease",
    "RoundStatistics",
    "count_floor",
    "fit_federated",
    "fuse_centroids",
    "initial_centroids",
    "release_round",
    "round_statistics",
    "split_epsilon",
    "update_centroids",
]
