"""``fedod-participant cohorts`` text output: marked cohorts say they are no finding."""

from __future__ import annotations

from participant.cli.cohorts import _text

DOC = {"study": "s", "method": "kmeans", "rounds": 3, "sent": [1, 2, 3], "cohorts": [
    {"cohort": 0, "size": 300.0, "centre": {"x0": 0.25}, "rule": None, "marks": [], "note": ""},
    {"cohort": 2, "size": 1.0, "centre": {"x0": 0.9}, "rule": None, "marks": ["noise", "unmoved"],
     "note": "not a finding: size within the noise; never moved from its start"}]}


def test_a_marked_cohort_is_printed_as_no_finding() -> None:
    lines = _text(DOC).splitlines()
    assert lines[1] == "  cohort 0: size 300  centre x0=0.25"
    assert lines[2] == "  cohort 2: size 1  centre x0=0.9"
    assert lines[3] == "    (not a finding: size within the noise; never moved from its start)"
    assert lines[4].startswith("1 of 2 cohorts are marked 'not a finding'")


def test_nothing_marked_adds_no_lines() -> None:
    doc = {**DOC, "cohorts": DOC["cohorts"][:1]}
    assert len(_text(doc).splitlines()) == 2
