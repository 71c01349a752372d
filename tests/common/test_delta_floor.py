"""The delta floor (common.study.delta_floor): one public ceiling on every delta a config produces.

A sparse grid's delta_grid, an online study's delta_gradient and a cohort study's Gaussian
delta 1/(n sqrt n) are each refused at config check above ``MAX_RELEASE_DELTA``; at the
ceiling (or just under it) they are accepted.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from config_kit import grid_doc
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from common.cohorts.params import CohortParams
from common.noise.gaussian import declared_delta
from common.online import OnlineParams
from common.study.config import StudyConfig
from common.study.delta_floor import MAX_RELEASE_DELTA, MIN_DECLARED_N, check_delta, min_declared_n

ABOVE = str(MAX_RELEASE_DELTA + Decimal("1e-18"))


def _grid(delta: str) -> Any:
    return StudyConfig.model_validate(grid_doc({"bins": 10, "cell_limit": 1000}, "1", delta))


def _online(delta: str) -> Any:
    return OnlineParams(dim=3, delta_gradient=delta)


def _kmeans(n: int) -> Any:
    return CohortParams(method="kmeans", epsilon=Decimal(1), k=2, sum_noise="gaussian",
                        declared_n=n)


def _dpm(n: int) -> Any:
    return CohortParams(method="dpm", epsilon=Decimal(1), leaf_noise="gaussian", declared_n=n)


@pytest.mark.parametrize(("make", "bad", "good", "match"), [
    (_grid, ABOVE, str(MAX_RELEASE_DELTA), "delta_grid .* exceeds the delta ceiling"),
    (_grid, "0.009", "1e-6", "delta_grid .* exceeds the delta ceiling"),
    (_online, ABOVE, str(MAX_RELEASE_DELTA), "delta_gradient .* exceeds the delta ceiling"),
    (_online, "0.005", "1e-6", "delta_gradient .* exceeds the delta ceiling"),
    (_kmeans, 2, MIN_DECLARED_N, "declared_n 2 is below"),
    (_kmeans, MIN_DECLARED_N - 1, 10_000, "is below 465"),
    (_dpm, 10, MIN_DECLARED_N, "declared_n 10 is below"),
])
def test_every_delta_a_config_produces_obeys_the_ceiling(make, bad, good, match) -> None:
    with pytest.raises(ValidationError, match=match):
        make(bad)
    make(good)


def test_min_declared_n_is_the_smallest_n_under_the_ceiling() -> None:
    assert MIN_DECLARED_N == 465
    assert declared_delta(MIN_DECLARED_N) <= MAX_RELEASE_DELTA < declared_delta(464)


@given(st.decimals(min_value=Decimal("1e-12"), max_value=Decimal("0.1"), places=12))
def test_min_declared_n_for_any_ceiling(ceiling: Decimal) -> None:
    n = min_declared_n(ceiling)
    assert Decimal(n) ** 3 * ceiling**2 >= 1
    assert n == 2 or Decimal(n - 1) ** 3 * ceiling**2 < 1


def test_check_delta() -> None:
    assert check_delta(MAX_RELEASE_DELTA, "delta") == MAX_RELEASE_DELTA
    with pytest.raises(ValueError, match="delta 0.5 exceeds the delta ceiling 0.0001"):
        check_delta(Decimal("0.5"), "delta")
