"""The dashboard's figures per study kind (coordinator.dashboard.figures)."""

from __future__ import annotations

from decimal import Decimal

from common.study.config import new_study_config
from coordinator.dashboard.figures import contributors_text, cost_items, spread, study_kind

FEATURES = [{"name": f"x{i}", "lo": 0.0, "hi": 1.0} for i in range(3)]


def _config(**sections):
    from common.study.config import FeatureSpec, PrivacyParams, StudyConfig

    base = new_study_config("s", [FeatureSpec(**f) for f in FEATURES], n_tables=5,
                            privacy=PrivacyParams(epsilon_lsh=Decimal(1)))
    return StudyConfig.model_validate({**base.model_dump(mode="json"), **sections})


def test_each_kind_shows_what_it_costs():
    plain = _config()
    assert study_kind(plain) == "independent"
    assert cost_items(plain) == [("release", "ε 1 per release")]
    stream = _config(online={"dim": 4})
    window = stream.online.epoch_cost()
    assert study_kind(stream) == "independent + stream"
    assert window.epsilon > 1 and window.delta == Decimal("0.000001")
    assert cost_items(stream)[1] == (
        "window", f"ε {window.epsilon.normalize():f}, δ 0.000001 per stream window")
    cohorts = _config(cohorts={"k": 2, "rounds": 4, "epsilon": "3"})
    assert study_kind(cohorts) == "independent + cohorts"
    assert cost_items(cohorts)[1] == (
        "cohorts", "ε 3 in all over at most 4 cohort rounds, on top of the releases")


def test_contributors_note_revoked_ones():
    assert contributors_text(1, 0) == "1 contributing participant"
    assert contributors_text(3, 1) == ("3 contributing participants, 1 since revoked (releases "
                                       "made before a revocation stay in the model)")


def test_spread_is_max_and_median_never_a_sum():
    assert spread([Decimal(1), Decimal(3), Decimal(2), Decimal(10)]) == (Decimal(10),
                                                                          Decimal("2.5"))
    assert spread([]) == (Decimal(0), Decimal(0))
