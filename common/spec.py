"""Study spec files: the JSON an operator writes for ``fedod-coordinator study create``.

A spec is a :class:`~common.schemas.StudyCreate` in JSON. Lines whose first non-blank
characters are ``//`` are comments (the template explains each field with them). Mistakes
are reported one line per problem, each with the JSON path of the value at fault, so an
operator can fix the file without reading a validation dump.

:func:`study_template` writes a commented spec from a CSV header. It reads column *names*
only: the public bounds are placeholders the operator must fill in from the study protocol
(clinical reference ranges, instrument limits), never from the data, which would leak it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from common.errors import InvalidInput
from common.schemas import StudyCreate

__all__ = ["LO_PLACEHOLDER", "HI_PLACEHOLDER", "load_study_spec", "study_template"]

LO_PLACEHOLDER = "PUBLIC_LOWER_BOUND"
HI_PLACEHOLDER = "PUBLIC_UPPER_BOUND"
_PLACEHOLDER_HINT = (
    "replace the placeholder with the public bound from the study protocol "
    "(a reference range, never a value computed from the data)"
)


def _strip_comments(text: str) -> str:
    """Blank out ``//`` comment lines, keeping line numbers for JSON error positions."""
    return "\n".join("" if ln.lstrip().startswith("//") else ln for ln in text.splitlines())


def _path(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _problem(error: Any) -> str:
    value = error.get("input")
    if value in (LO_PLACEHOLDER, HI_PLACEHOLDER):
        message = _PLACEHOLDER_HINT
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
        data = json.loads(_strip_comments(text))
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"the spec is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from exc
    try:
        return StudyCreate.model_validate(data)
    except ValidationError as exc:
        problems = [_problem(e) for e in exc.errors()]
        raise InvalidInput(
            f"the spec has {len(problems)} problem(s):\n" + "\n".join(f"  {p}" for p in problems),
            problems=problems,
        ) from exc


def study_template(columns: Sequence[str], study_id: str = "my-study") -> str:
    """A commented spec for a dataset with these column names, bounds left as placeholders."""
    if not columns:
        raise InvalidInput("the CSV header names no columns")
    features = ",\n".join(
        f'    {{"name": {json.dumps(c)}, "lo": "{LO_PLACEHOLDER}", "hi": "{HI_PLACEHOLDER}"}}'
        for c in columns
    )
    return f"""// fedod study spec. Lines starting with // are comments.
// Create the study with: fedod-coordinator study create THIS_FILE
{{
  // Letters, digits, '_', '.', '-'. Participants name the study by it.
  "study_id": {json.dumps(study_id)},
  // One entry per released column, in order. Delete identifier and label columns: a column
  // listed here leaves each hospital as part of its noisy histograms.
  // lo/hi are PUBLIC bounds: take them from the study protocol (reference ranges, device
  // limits), never from the data. Values outside them are clipped at release time.
  "features": [
{features}
  ],
  // LSH iTables: number of tables and their expected size (cells per table).
  "lsh": {{"n_tables": 100, "sample_size": 16}},
  // Grid k-NN on a few features (null for none): bins per axis, k neighbours.
  "grid": null,
  // Privacy cost of ONE release by one participant. epsilon_grid > 0 needs a grid.
  "privacy": {{"epsilon_lsh": "1", "epsilon_grid": "0", "delta_grid": "0"}},
  // Days until the signed config expires.
  "valid_days": 365
}}
"""
