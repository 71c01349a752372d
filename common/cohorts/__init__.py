"""Private cohort profiles (issue 9).

- :mod:`common.cohorts.kmeans`: federated DP k-means with cluster fusion (DP-KCCM) as pure
  functions over what participants release: seed-derived initial centroids, one
  participant's clipped round statistics and their noisy release, the coordinator's update,
  and the fusion of ``n * k`` centroids down to ``k``.
- :mod:`common.cohorts.plan`: the public study parameters and the exact budget split.
- :mod:`common.cohorts.params`: the signed ``cohorts`` section of a study config.
- :mod:`common.cohorts.protocol`: the round protocol the coordinator and participants run.
"""

from typing import Any

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


def __getattr__(name: str) -> Any:
    """Load :mod:`common.cohorts.kmeans` (and OpenDP with it) on first use only: the signed
    config imports :mod:`common.cohorts.params`, and must not pay OpenDP's import."""
    if name in __all__:
        from common.cohorts import kmeans

        return getattr(kmeans, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
