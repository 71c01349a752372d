"""Trust accounting (h_min), the signed cohort parameters, the noise SNR and its warning."""

from __future__ import annotations

import math
from decimal import Decimal
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from common.histograms.hashing import derive_lsh_family
from common.noise import charged_epsilon, honest_minimum, min_survivors
from common.noise.planning import (
    config_noise_warning,
    expected_cells,
    noise_draws,
    noise_warning,
    occupied_snr,
    plan_lsh_tables,
    score_snr,
)
from common.secagg.params import AggregationParams


@pytest.mark.parametrize(
    ("n", "d", "t", "h", "survivors"),
    [(10, 0, 0, 10, 10), (10, 2, 1, 7, 8), (3, 1, 1, 1, 2), (1, 0, 0, 1, 1)],
)
def test_honest_minimum(n: int, d: int, t: int, h: int, survivors: int) -> None:
    assert honest_minimum(n, d, t) == h
    assert min_survivors(n, d, t) == survivors == h + t


@pytest.mark.parametrize(
    ("n", "d", "t", "match"),
    [(5, 3, 2, "honest survivors"), (2, 2, 0, "honest survivors"), (0, 0, 0, "cohort_size"),
     (5, -1, 0, "max_dropouts"), (5, 0, -1, "max_colluders"), (5, True, 0, "max_dropouts")],
)
def test_impossible_cohorts_are_refused(n: int, d: int, t: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        honest_minimum(n, d, t)


def test_charged_epsilon_is_the_study_epsilon() -> None:
    assert charged_epsilon("0.1") == Decimal("0.1")
    with pytest.raises(ValueError, match="positive"):
        charged_epsilon("0")


def test_aggregation_params() -> None:
    """The signed cohort parameters (the one ``AggregationParams``) agree with the accounting."""
    default = AggregationParams()
    assert (default.mode, default.h_min, default.max_colluders) == ("independent", None, 1)
    secure = AggregationParams(mode="secure", cohort_size=10, max_dropouts=2, max_colluders=1,
                               expected_records=500)
    assert (secure.h_min, secure.min_roster) == (honest_minimum(10, 2, 1), 8)
    assert secure.min_roster == min_survivors(10, 2, 1)
    assert AggregationParams.model_validate_json(secure.model_dump_json()) == secure


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"mode": "secure"}, "needs cohort_size"),
        ({"mode": "secure", "cohort_size": 1}, "needs cohort_size"),
        ({"mode": "secure", "cohort_size": 4, "max_dropouts": 2, "max_colluders": 2},
         "no honest participant"),
        ({"h_min": 1}, "secure aggregation only"),
        ({"mode": "secure", "cohort_size": "4"}, "valid integer"),
        ({"mode": "shared"}, "independent"),
        ({"expected_records": 0}, "greater than or equal"),
    ],
)
def test_aggregation_params_refused(fields: dict[str, object], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        AggregationParams.model_validate(fields)


@pytest.mark.parametrize("size", [4, 16, 64])
def test_expected_cells_matches_derived_families(size: int) -> None:
    family = derive_lsh_family(b"planning", [0.0] * 4, [1.0] * 4, 3000, size)
    assert family.n_cells / family.n_tables == pytest.approx(expected_cells(size), rel=0.04)


def test_noise_draws() -> None:
    assert noise_draws("independent", 10) == 10
    assert noise_draws("secure", 10) == 1
    assert noise_draws("secure", 10, 8) == pytest.approx(1.25)
    with pytest.raises(ValueError, match="h_min"):
        noise_draws("secure", 10, 11)


def test_score_snr_formula() -> None:
    """Z = N epsilon / (C sqrt(2 k m)), checked against the measured noise of a merge."""
    z = score_snr("0.5", "independent", 4, 1000, 25, 16)
    expect = 4000 * 0.5 / (expected_cells(16) * math.sqrt(2 * 4 * 25))
    assert z == pytest.approx(expect)


def test_warning_for_the_unseen_64_feature_case() -> None:
    """The issue's case: 10 hospitals of a few hundred records, epsilon 0.1 each, m = 100:
    warned (the even-fill SNR is below 1; the occupied-cell SNR is not), with what would
    help; not under secure aggregation with 52 tables of size 8 (even-fill SNR 3)."""
    text = noise_warning("0.1", "independent", 10, 200, 100, 16)
    assert text is not None and text.startswith("noise may cost accuracy")
    assert "secure aggregation" in text and "participants (hospitals)" in text
    assert noise_warning("0.1", "secure", 10, 200, 52, 8) is None
    assert noise_warning("0.1", "independent", 10, 700, 100, 16) is None
    assert noise_warning("1", "independent", 2, 50_000, 100, 16) is None


def test_a_soft_warning_never_proposes_tables_against_the_rule() -> None:
    """10 secure hospitals of 200 records at epsilon 0.1: the rule's own tables (occupied
    SNR above 1, even fill below) are warned about softly, but the warning proposes no other
    tables: the rule chose them by the occupied figure, and smaller tables scored worse."""
    from common.detectors.rules import lsh_rule

    plan = lsh_rule(d=12, expected_records=200, cohort_size=10, epsilon="0.1", mode="secure",
                    h_min=9)
    args = ("0.1", "secure", 10, 200, plan.n_tables, plan.sample_size, 9)
    assert occupied_snr(*args) >= 1
    text = noise_warning(*args)
    assert text is not None and text.startswith("noise may cost accuracy")
    assert "tables instead of" not in text and "tables of size" not in text
    assert "epsilon" in text and "participants (hospitals)" in text
    # the same inputs below the occupied floor still name the tables that would reach it
    hard = noise_warning("1", "independent", 2, 20, 100, 1000)
    assert hard is not None and "tables" in hard.split("To bring the first to 1:")[1]


def test_noise_dominates_when_even_the_occupied_cells_are_below_one() -> None:
    """Two hospitals of 20 records under 100 deep tables: both SNRs below 1. Each remedy
    named reaches 1 alone."""
    text = noise_warning("1", "independent", 2, 20, 100, 1000)
    assert text is not None and "dominated by noise" in text
    occupied = occupied_snr("1", "independent", 2, 20, 100, 1000)
    assert occupied < 1 and f"{occupied:.2f} over the cells" in text
    eps = float(text.split("To bring the first to 1: epsilon ")[1].split(" ")[0])
    assert occupied_snr(str(eps * 1.01), "independent", 2, 20, 100, 1000) >= 1
    more = int(text.split("; or ")[-1].split(" participants")[0])
    assert occupied_snr("1", "independent", more, 20, 100, 1000) >= 1
    assert occupied_snr("1", "independent", more - 1, 20, 100, 1000) < 1


def _config(epsilon: str, n_tables: int, sample_size: int, **agg: object) -> SimpleNamespace:
    return SimpleNamespace(
        privacy=SimpleNamespace(epsilon_lsh=Decimal(epsilon)),
        lsh=SimpleNamespace(n_tables=n_tables, sample_size=sample_size),
        aggregation=AggregationParams.model_validate(agg) if agg else None,
    )


def test_config_noise_warning_reads_public_fields_only() -> None:
    noisy = _config("0.1", 100, 16, cohort_size=10, expected_records=20)
    assert "dominated by noise" in (config_noise_warning(noisy) or "")
    assert config_noise_warning(_config("0.1", 100, 16)) is None  # nothing declared
    undeclared = _config("0.1", 100, 16, cohort_size=10)
    assert config_noise_warning(undeclared) is None
    given = AggregationParams(cohort_size=10, expected_records=200)
    assert config_noise_warning(_config("0.1", 100, 16), given) is not None


@pytest.mark.parametrize(
    ("n_tables", "sample_size", "plan"),
    [(None, None, (100, 16)), (70, None, (70, 16)), (None, 8, (100, 8)), (70, 8, (70, 8))],
)
def test_plan_lsh_tables_without_a_cohort_keeps_fixed_values(
        n_tables: int | None, sample_size: int | None, plan: tuple[int, int]) -> None:
    assert plan_lsh_tables(n_tables, sample_size) == plan
