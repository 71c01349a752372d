"""Study spec files: the JSON an operator writes for ``fedod-coordinator study create``.

A spec is a :class:`~common.wire.schemas.StudyCreate` in JSON. Lines whose first non-blank
characters are ``//`` are comments (the template explains each field with them), and a comma
before a closing ``]`` or ``}`` is allowed, so deleting a template's last feature line leaves
a valid spec. Mistakes are reported one line per problem, each with the JSON path of the value
at fault (placeholders left in a feature: one line per feature, by name), so an operator can
fix the file without reading a validation dump.

:func:`study_template` writes a commented spec from a CSV header. It reads column *names*
only: the public bounds are placeholders the operator must fill in from the study protocol
(clinical reference ranges, instrument limits), never from the data, which would leak it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from common.errors import InvalidInput
from common.wire.schemas import StudyCreate

__all__ = ["LO_PLACEHOLDER", "HI_PLACEHOLDER", "COHORT_PLACEHOLDER", "RECORDS_PLACEHOLDER",
           "left_out_columns", "load_study_spec", "study_template"]

LO_PLACEHOLDER = "PUBLIC_LOWER_BOUND"
HI_PLACEHOLDER = "PUBLIC_UPPER_BOUND"
COHORT_PLACEHOLDER = "NUMBER_OF_PARTICIPANTS"
RECORDS_PLACEHOLDER = "EXPECTED_RECORDS_PER_PARTICIPANT"
_PLACEHOLDER_HINT = (
    "replace the placeholder with the public bound from the study protocol "
    "(a reference range, never a value computed from the data)"
)
_HINTS = {
    LO_PLACEHOLDER: _PLACEHOLDER_HINT,
    HI_PLACEHOLDER: _PLACEHOLDER_HINT,
    COHORT_PLACEHOLDER: "replace the placeholder with the number of participants (hospitals) "
    "you expect to release, or delete the line",
    RECORDS_PLACEHOLDER: "replace the placeholder with a public estimate of each "
    "participant's record count (never a count measured on the data), or delete the line",
}
_IDENTIFIER = re.compile(r"(^|[_\-. ])(id|uuid|key|mrn)$|^(id|uuid|mrn)([_\-. ]|$)")
_CAMEL_ID = re.compile(r"[a-z](Id|ID)$")
_LABELS = {"label", "labels", "target", "class", "outlier", "is_outlier", "ground_truth",
           "anomaly", "is_anomaly"}


def _strip_comments(text: str) -> str:
    """Blank out ``//`` comment lines, keeping line numbers for JSON error positions."""
    return "\n".join("" if ln.lstrip().startswith("//") else ln for ln in text.splitlines())


def _path(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _drop_trailing_commas(text: str) -> str:
    """Remove each comma that only whitespace separates from a closing ``]`` or ``}``
    (outside strings), keeping every other character where it was."""
    out: list[str] = []
    in_string, escaped, pending = False, False, -1
    for ch in text:
        if in_string:
            in_string = not (ch == '"' and not escaped)
            escaped = ch == "\\" and not escaped
        elif ch == '"':
            in_string, pending = True, -1
        elif ch == ",":
            pending = len(out)
        elif ch in "]}" and pending >= 0:
            out[pending] = " "
            pending = -1
        elif not ch.isspace():
            pending = -1
        out.append(ch)
    return "".join(out)


def _placeholder_lines(errors: list[Any], data: Any) -> tuple[list[str], list[Any]]:
    """Placeholder bounds left in features: one line per feature, named; the other errors."""
    fields: dict[int, list[str]] = {}
    rest = []
    for e in errors:
        loc = e["loc"]
        if (e.get("input") in (LO_PLACEHOLDER, HI_PLACEHOLDER) and len(loc) == 3
                and loc[0] == "features" and isinstance(loc[1], int)):
            names = fields.setdefault(loc[1], [])
            if loc[2] not in names:
                names.append(str(loc[2]))
        else:
            rest.append(e)
    lines = []
    for i, names in sorted(fields.items()):
        try:
            name = json.dumps(data["features"][i]["name"])
        except (KeyError, IndexError, TypeError):
            name = f"#{i + 1}"
        lines.append(f"feature {name}: {' and '.join(names)} still the placeholder")
    return lines, rest


def _problem(error: Any) -> str:
    value = error.get("input")
    if isinstance(value, str) and value in _HINTS:
        message = _HINTS[value]
    else:
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown field (check its spelling against the template)"
        elif error["type"] == "missing":
            message = "required field is missing"
    return f"{_path(error['loc'])}: {message}"


def load_study_spec(text: str) -> StudyCreate:
    """Parse a spec file's text into a :class:`StudyCreate`.

    Raises
    ------
    InvalidInput
        Not JSON (with line and column), or one line ``path: problem`` per invalid value.
    """
    try:
        data = json.loads(_drop_trailing_commas(_strip_comments(text)))
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"the spec is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from exc
    try:
        return StudyCreate.model_validate(data)
    except ValidationError as exc:
        grouped, rest = _placeholder_lines(list(exc.errors()), data)
        problems = [*grouped, *(_problem(e) for e in rest)]
        hint = f"\nfeatures: {_PLACEHOLDER_HINT}" if grouped else ""
        raise InvalidInput(
            f"the spec has {len(problems)} problem(s):\n" + "\n".join(f"  {p}" for p in problems)
            + hint,
            problems=problems,
        ) from exc


def left_out_columns(columns: Sequence[str]) -> list[str]:
    """Columns whose names say they are record identifiers or labels (``patient_id``,
    ``record_id``, ``label``, ``target``...): the template leaves them out of the features."""
    return [c for c in columns if _IDENTIFIER.search(c.strip().lower())
            or _CAMEL_ID.search(c.strip()) or c.strip().lower() in _LABELS]


def study_template(columns: Sequence[str], study_id: str = "my-study",
                   leave_out: Sequence[str] = ()) -> str:
    """A commented spec for a dataset with these column names, bounds left as placeholders.

    Identifier and label columns (by name, :func:`left_out_columns`, plus ``leave_out``) are
    not listed as features; a comment names them."""
    if not columns:
        raise InvalidInput("the CSV header names no columns")
    left_out = set(leave_out) | set(left_out_columns(columns))
    skipped = [c for c in columns if c in left_out]
    kept = [c for c in columns if c not in skipped]
    if not kept:
        raise InvalidInput(f"every column looks like an identifier or a label ({skipped}); "
                           "no feature is left for the template")
    features = "\n".join(
        f'    {{"name": {json.dumps(c)}, "lo": "{LO_PLACEHOLDER}", "hi": "{HI_PLACEHOLDER}"}},'
        for c in kept
    )
    note = (f"  // Left out as identifier or label columns (by name): "
            f"{', '.join(json.dumps(c) for c in skipped)}.\n  // Copy a line above for any of "
            "them that is really a feature.\n" if skipped else "")
    return f"""// fedod study spec. Lines starting with // are comments.
// Create the study with: fedod-coordinator study create THIS_FILE
{{
  // Letters, digits, '_', '.', '-'. Participants name the study by it.
  "study_id": {json.dumps(study_id)},
  // One entry per released column, in order. Delete identifier and label columns: a column
  // listed here leaves each hospital as part of its noisy histograms. Deleting any line
  // leaves valid JSON (a comma before ] is allowed).
  // lo/hi are PUBLIC bounds: take them from the study protocol (reference ranges, device
  // limits), never from the data. Values outside them are clipped at release time.
  "features": [
{features}
{note}  ],
  // Who releases, in public estimates (never counts measured on the data): the number of
  // participants and the records each expects to hold. They choose the LSH tables for the
  // noise and let 'study create', 'contribute' and 'score' warn when the noise will drown
  // the signal. Delete both lines to skip the check. "mode": "secure" (3+ participants) sums
  // the releases under secure aggregation with one noise draw (README).
  "aggregation": {{
    "mode": "independent",
    "cohort_size": "{COHORT_PLACEHOLDER}",
    "expected_records": "{RECORDS_PLACEHOLDER}",
  }},
  // LSH iTables: left out, the number of tables and their size are chosen for the noise from
  // the aggregation above (100 tables of size 16 without it). To fix them, add:
  // "lsh": {{"n_tables": 100, "sample_size": 16}},
  // Grid k-NN on a few features (null for none): bins per axis, k neighbours.
  "grid": null,
  // Privacy cost of ONE release by one participant. epsilon_grid > 0 needs a grid.
  "privacy": {{"epsilon_lsh": "1", "epsilon_grid": "0", "delta_grid": "0"}},
  // Days until the signed config expires.
  "valid_days": 365,
}}
"""
