"""Distributed privacy noise: exact Pólya shares of discrete Laplace (:mod:`common.noise.polya`)."""

from common.noise.polya import noise_parameters, sample_negative_binomial, sample_noise_share

__all__ = ["noise_parameters", "sample_negative_binomial", "sample_noise_share"]
