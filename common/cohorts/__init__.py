"""Private cohort profiles (issue 9).

- :mod:`common.cohorts.kmeans`: federated DP k-means with cluster fusion (DP-KCCM) as pure
  functions over what participants release: seed-derived initial centroids, one
  participant's clipped round statistics and their noisy release, the coordinator's update,
  and the fusion of ``n * k`` centroids down to ``k``.
- :mod:`common.cohorts.plan`: the public study parameters and the exact budget split.
"""

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
