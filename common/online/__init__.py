"""Streaming mode: differentially private online active learning (Ghassemi et al., AISec 2016).

- :mod:`common.online.query`: the private query rules and their true epsilon.
- :mod:`common.online.noise`: the noisy mini-batch gradient sum (OpenDP Gaussian).
- :mod:`common.online.learner`: projected SGD for a linear SVM with both batching schemes.
- :mod:`common.online.accounting`: the per-record (and so per-stream) privacy charge.
"""

from common.online.accounting import ceil_budget, record_cost, selection_cost
from common.online.learner import (
    OnlineConfig,
    OnlineSVM,
    apply_step,
    hinge_gradient,
    project_ball,
    step_size,
)
from common.online.noise import GradientNoise, gaussian_scale, make_gradient_noise
from common.online.query import ExponentialRule, QueryRule, RandomizedResponseRule, bernoulli

__all__ = [
    "ExponentialRule",
    "GradientNoise",
    "OnlineConfig",
    "OnlineSVM",
    "QueryRule",
    "RandomizedResponseRule",
    "apply_step",
    "bernoulli",
    "ceil_budget",
    "gaussian_scale",
    "hinge_gradient",
    "make_gradient_noise",
    "project_ball",
    "record_cost",
    "selection_cost",
    "step_size",
]
