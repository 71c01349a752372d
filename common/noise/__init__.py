"""Every privacy-noise mechanism and its calibration.

The OpenDP modules (``laplace``, ``gaussian``, ``gradient``) are imported by name only where a
release is drawn; this package imports the pure ones.

- :mod:`common.noise.laplace`: discrete Laplace over count vectors and its thresholded sparse
  form (OpenDP), the mechanism of every LSH and grid release.
- :mod:`common.noise.gaussian`: discrete Gaussian for cohort histograms and sums (OpenDP).
- :mod:`common.noise.gradient`: Gaussian noise of streaming gradient sums (OpenDP).
- :mod:`common.noise.polya`: exact Pólya shares whose sum over ``h_min`` parties is discrete
  Laplace (secure aggregation).
- :mod:`common.noise.scale`: the LSH and grid histograms' sensitivities, ``scale = sensitivity
  / epsilon`` of the discrete Laplace (exact) and its standard deviation (no OpenDP).
- :mod:`common.noise.tails`: how far honest noise can stray (the poisoning bounds), for one
  draw and for a sum of many Pólya shares.
- :mod:`common.noise.accounting`: ``h_min`` from the signed cohort parameters
  (:class:`common.secagg.params.AggregationParams`), the threat model, what is charged.
- :mod:`common.noise.planning`: the LSH tables' signal-to-noise and the noise warning (the
  tables themselves are chosen by :mod:`common.detectors.rules`).
"""

from common.noise.accounting import charged_epsilon, honest_minimum, min_survivors
from common.noise.planning import noise_warning, score_snr
from common.noise.polya import noise_parameters, sample_negative_binomial, sample_noise_share

__all__ = [
    "charged_epsilon",
    "honest_minimum",
    "min_survivors",
    "noise_parameters",
    "noise_warning",
    "sample_negative_binomial",
    "sample_noise_share",
    "score_snr",
]
