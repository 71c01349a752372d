"""The released cohort model: validation, assignment in the public unit box, JSON round trip."""

import numpy as np
import pytest

from common.cohorts.model import CohortModel, Condition


def _model(**kw):
    args = dict(centroids=[[0.0, 0.0], [10.0, 100.0]], masses=[5.0, -3.0],
                lo=[0.0, 0.0], hi=[10.0, 100.0])
    args.update(kw)
    return CohortModel(**args)


def test_masses_clamped_and_read_only():
    model = _model()
    np.testing.assert_array_equal(model.masses, [5.0, 0.0])
    with pytest.raises(ValueError):
        model.centroids[0, 0] = 1.0


def test_assign_uses_public_unit_box():
    model = _model()
    index, dist = model.assign([[9.0, 90.0], [1.0, 10.0], [5.0, 50.0]])
    np.testing.assert_array_equal(index, [1, 0, 0])  # the tie goes to the lower index
    np.testing.assert_allclose(dist, [np.hypot(0.1, 0.1), np.hypot(0.1, 0.1), np.hypot(0.5, 0.5)])


@pytest.mark.parametrize("kw, match", [
    ({"centroids": np.zeros((0, 2))}, "non-empty"),
    ({"masses": [1.0]}, "masses"),
    ({"hi": [10.0, 0.0]}, "bounds"),
    ({"masses": [1.0, np.nan]}, "finite"),
    ({"rules": ((),)}, "rules"),
])
def test_rejects_malformed(kw, match):
    with pytest.raises(ValueError, match=match):
        _model(**kw)


def test_json_round_trip_and_rules():
    rules = ((Condition(0, 5.0, False),), (Condition(0, 5.0, True), Condition(1, 61.5, True)))
    model = _model(rules=rules)
    back = CohortModel.from_json(model.to_json())
    np.testing.assert_array_equal(back.centroids, model.centroids)
    assert back.rules == rules
    assert back.describe(1, ["age", "bmi"]) == "age >= 5 and bmi >= 61.5"
    assert _model().describe(0) == "cohort 0 (nearest centre)"
    with pytest.raises(ValueError, match="not a cohort model"):
        CohortModel.from_json('{"centroids": []}')
