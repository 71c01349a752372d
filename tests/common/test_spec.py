"""Study spec files: comments, one line per problem with its JSON path, the template."""

from __future__ import annotations

import json

import pytest

from common.errors import InvalidInput
from common.spec import HI_PLACEHOLDER, LO_PLACEHOLDER, load_study_spec, study_template

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
         "features[0].lo: replace the placeholder with the public bound"),
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


def test_several_problems_are_all_listed():
    spec = {**VALID, "features": [{"name": "a", "lo": LO_PLACEHOLDER, "hi": HI_PLACEHOLDER}]}
    with pytest.raises(InvalidInput, match="2 problem") as info:
        load_study_spec(json.dumps(spec))
    assert info.value.context["problems"] == [
        f"features[0].{b}: replace the placeholder with the public bound from the study "
        "protocol (a reference range, never a value computed from the data)"
        for b in ("lo", "hi")
    ]


def test_not_json_names_line_and_column():
    with pytest.raises(InvalidInput, match=r"not valid JSON: .* line 3, column"):
        load_study_spec('{\n"study_id": "s1",\n oops}')


def test_template_lists_columns_with_placeholders_and_is_refused_until_filled():
    text = study_template(["age", "bmi"], "trial")
    with pytest.raises(InvalidInput, match="4 problem"):
        load_study_spec(text)
    filled = text.replace(f'"{LO_PLACEHOLDER}"', "0").replace(f'"{HI_PLACEHOLDER}"', "100")
    spec = load_study_spec(filled)
    assert [f.name for f in spec.features] == ["age", "bmi"]
    assert spec.study_id == "trial"


def test_template_needs_columns():
    with pytest.raises(InvalidInput, match="no columns"):
        study_template([])
