"""Study spec files: comments, one line per problem with its JSON path, the template."""

from __future__ import annotations

import json

import pytest

from common.errors import InvalidInput
from common.study.spec import (
    COHORT_PLACEHOLDER,
    HI_PLACEHOLDER,
    LO_PLACEHOLDER,
    RECORDS_PLACEHOLDER,
    load_study_spec,
    study_template,
)

VALID = {
    "study_id": "s1",
    "features": [{"name": "age", "lo": 0.0, "hi": 120.0}],
    "privacy": {"epsilon_lsh": "1"},
}


def test_comment_lines_are_ignored():
    text = "// a comment\n" + json.dumps(VALID, indent=2).replace("\n", "\n  // inline note\n", 1)
    assert load_study_spec(text).study_id == "s1"


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ({"features": [{"name": "age", "lo": LO_PLACEHOLDER, "hi": 120.0}]},
         'feature "age": lo still the placeholder'),
        ({"features": [{"name": "age", "lo": 5.0, "hi": 1.0}]},
         "features[0]: feature 'age': lo (5.0) must be < hi (1.0)"),
        ({"privacy": {"epsilon_lsh": "1", "epsilom_grid": "1"}},
         "privacy.epsilom_grid: unknown field"),
        ({"privacy": {}}, "privacy.epsilon_lsh: required field is missing"),
    ],
)
def test_each_problem_is_one_line_with_its_path(patch, expected):
    with pytest.raises(InvalidInput) as info:
        load_study_spec(json.dumps({**VALID, **patch}))
    lines = info.value.message.splitlines()
    assert lines[0].startswith("the spec has 1 problem")
    assert lines[1].strip().startswith(expected)
    assert "errors.pydantic.dev" not in info.value.message


def test_several_problems_are_all_listed_placeholders_once_per_feature():
    spec = {**VALID, "features": [{"name": "a", "lo": LO_PLACEHOLDER, "hi": HI_PLACEHOLDER},
                                  {"name": "b", "lo": 0.0, "hi": HI_PLACEHOLDER}],
            "privacy": {"epsilon_lsh": "1", "epsilom_grid": "1"}}
    with pytest.raises(InvalidInput, match="3 problem") as info:
        load_study_spec(json.dumps(spec))
    assert info.value.context["problems"] == [
        'feature "a": lo and hi still the placeholder',
        'feature "b": hi still the placeholder',
        "privacy.epsilom_grid: unknown field (check its spelling against the template)",
    ]
    assert info.value.message.endswith(  # the fix is said once, not per bound
        "features: replace the placeholder with the public bound from the study protocol (a "
        "reference range, never a value computed from the data)")


def test_not_json_names_line_and_column():
    with pytest.raises(InvalidInput, match=r"not valid JSON: .* line 3, column"):
        load_study_spec('{\n"study_id": "s1",\n oops}')


def test_template_lists_columns_with_placeholders_and_is_refused_until_filled():
    text = study_template(["age", "bmi"], "trial")
    with pytest.raises(InvalidInput, match="4 problem"):  # 2 features, cohort, records
        load_study_spec(text)
    filled = text.replace(f'"{LO_PLACEHOLDER}"', "0").replace(f'"{HI_PLACEHOLDER}"', "100")
    with pytest.raises(InvalidInput, match="2 problem"):
        load_study_spec(filled)
    planned = filled.replace(f'"{COHORT_PLACEHOLDER}"', "4").replace(
        f'"{RECORDS_PLACEHOLDER}"', "500")
    spec = load_study_spec(planned)
    assert [f.name for f in spec.features] == ["age", "bmi"]
    assert spec.study_id == "trial"
    assert spec.aggregation is not None
    assert (spec.aggregation.cohort_size, spec.aggregation.expected_records) == (4, 500)
    # deleting the two planning lines, as the template says, leaves a valid spec
    unplanned = "\n".join(ln for ln in filled.splitlines()
                          if COHORT_PLACEHOLDER not in ln and RECORDS_PLACEHOLDER not in ln)
    spec = load_study_spec(unplanned)
    assert spec.aggregation is not None and spec.aggregation.cohort_size is None


def test_template_needs_columns():
    with pytest.raises(InvalidInput, match="no columns"):
        study_template([])
