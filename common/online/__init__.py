"""Streaming mode: differentially private online active learning.

- :mod:`common.online.ftrl`: DP-FTRL, the default learner (weights from noisy prefix sums).
- :mod:`common.online.factor`: the square-root factorisation, the default noise of those
  prefix sums; :mod:`common.online.tree`: tree aggregation (``prefix: "tree"``).
- :mod:`common.online.query`: the private query rules and their true epsilon.
- :mod:`common.noise.gradient`: the noisy mini-batch gradient sum (OpenDP Gaussian).
- :mod:`common.online.learner`: FLMB, the per-batch-noise SGD of Ghassemi et al. (AISec 2016)
  (the baseline), and the projections and centring both learners use.
- :mod:`common.online.accounting`: the per-record (and so per-stream) privacy charge.
- :mod:`common.online.params`: the signed config's online section, its schedule and charge.
- :mod:`common.online.noise`: the memoised gradient noise of each learner family.
- :mod:`common.online.schedule`: a schedule window's single release (padding, the batch).
- :mod:`common.online.wire`: the gradient release and online model on the wire.
"""

import importlib
from typing import Any

_HOME = {
    "ceil_budget": "accounting", "record_cost": "accounting", "selection_cost": "accounting",
    "OnlineConfig": "learner", "OnlineSVM": "learner", "apply_step": "learner",
    "centre_from_release": "learner", "centred_rows": "learner", "project_rows": "learner",
    "federated_step": "learner", "hinge_gradient": "learner", "project_ball": "learner",
    "running_mean": "learner",
    "step_size": "learner", "GradientNoise": "common.noise.gradient",
    "gaussian_scale": "common.noise.gradient",
    "make_gradient_noise": "common.noise.gradient", "ExponentialRule": "query",
    "QueryRule": "query",
    "RandomizedResponseRule": "query", "bernoulli": "query", "OnlineParams": "params",
    "to_ball": "params", "centre_batch": "schedule", "pad_queries": "schedule",
    "window_batch": "schedule", "FTRLConfig": "ftrl", "OnlineFTRL": "ftrl",
    "ftrl_rows": "ftrl", "ftrl_step": "ftrl", "ftrl_weights": "ftrl",
    "TreeAggregator": "tree", "tree_noise": "tree", "SqrtAggregator": "factor",
    "factor_noise": "factor", "prefix_sums": "factor",
}


def __getattr__(name: str) -> Any:
    """Import submodules on first use: OpenDP (via :mod:`common.noise.gradient`) takes about a
    second to import, and ``common.study.config`` needs only ``params``."""
    if name not in _HOME:
        raise AttributeError(f"module 'common.online' has no attribute {name!r}")
    home = _HOME[name]
    module = home if "." in home else f"common.online.{home}"
    return getattr(importlib.import_module(module), name)


__all__ = [
    "ExponentialRule",
    "FTRLConfig",
    "OnlineFTRL",
    "TreeAggregator",
    "SqrtAggregator",
    "factor_noise",
    "prefix_sums",
    "ftrl_rows",
    "ftrl_step",
    "ftrl_weights",
    "tree_noise",
    "OnlineParams",
    "federated_step",
    "pad_queries",
    "window_batch",
    "to_ball",
    "GradientNoise",
    "OnlineConfig",
    "OnlineSVM",
    "QueryRule",
    "RandomizedResponseRule",
    "apply_step",
    "bernoulli",
    "ceil_budget",
    "centre_batch",
    "centre_from_release",
    "centred_rows",
    "gaussian_scale",
    "hinge_gradient",
    "make_gradient_noise",
    "project_ball",
    "project_rows",
    "record_cost",
    "running_mean",
    "selection_cost",
    "step_size",
]
