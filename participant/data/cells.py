"""Per-cell checks of one feature column: which cells are missing, non-numeric or infinite.

Each verdict depends on its own cell only (never on the other rows of the chunk or file), so
a release can drop exactly the rows a bad cell is in (:mod:`participant.data.reader`): one malformed
row then moves the release by at most what removing one record may.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from common.errors import SchemaMismatch

MAX_SHOWN = 5
"""How many bad rows an error names per column."""

NUMBER = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"
"""Plain decimal numbers; a cell outside this pattern is parsed on its own (slow path)."""


@dataclass(frozen=True)
class Cells:
    """Values of one column (``NaN`` where bad) and the three kinds of bad cell."""

    x: NDArray[np.float64]
    missing: NDArray[np.bool_]  # empty / NA / null, or NaN
    non_numeric: NDArray[np.bool_]
    non_finite: NDArray[np.bool_]  # +-inf
    missing_label: str = "missing values"

    @property
    def bad(self) -> NDArray[np.bool_]:
        return self.missing | self.non_numeric | self.non_finite

    def problem(self) -> str:
        """What is wrong with this column, in the words ``check-data`` prints."""
        kinds = [name for name, mask in ((self.missing_label, self.missing),
                                         ("non-numeric values", self.non_numeric),
                                         ("non-finite values", self.non_finite)) if mask.any()]
        return " and ".join(kinds)


def _is_text(arr: pa.Array) -> bool:
    return bool(pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)
                or pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type))


def _unquoted(arr: pa.Array) -> pa.Array:
    """Strip surrounding spaces and then one pair of double quotes (a CSV read without
    quoting; the typed reader of ``check-data`` accepts both too)."""
    return pc.replace_substring_regex(arr, pattern=r'^[ \t]*(?:"(.*)"|(.*?))[ \t]*$',
                                      replacement=r"\1\2")


def _parse(arr: pa.Array) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Parse text cells as float64; ``(values, non_numeric)`` with NaN where not a number."""
    n = len(arr)
    try:
        return np.asarray(pc.cast(arr, pa.float64()).fill_null(np.nan).to_numpy(
            zero_copy_only=False), dtype=np.float64), np.zeros(n, dtype=np.bool_)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    x = np.full(n, np.nan)
    bad = np.zeros(n, dtype=np.bool_)
    nulls = arr.is_null().to_numpy(zero_copy_only=False)
    plain = pc.fill_null(pc.match_substring_regex(arr, NUMBER), False).to_numpy(
        zero_copy_only=False)
    fast = np.flatnonzero(plain)
    try:
        x[fast] = pc.cast(arr.take(pa.array(fast)), pa.float64()).to_numpy(zero_copy_only=False)
        slow = np.flatnonzero(~plain & ~nulls)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        slow = np.flatnonzero(~nulls)
    for i in slow:  # one cell at a time: its verdict cannot depend on another cell
        try:
            value = pc.cast(arr[int(i)], pa.float64()).as_py()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            bad[i] = True
            continue
        x[i] = np.nan if value is None else value
    return x, bad


def column_cells(arr: pa.Array, *, unquote: bool = False) -> Cells | None:
    """Check one feature column cell by cell; ``None`` if its TYPE is not numeric or text
    (a property of the whole file, e.g. a Parquet column of dates, not of one row)."""
    nulls = arr.is_null().to_numpy(zero_copy_only=False)
    if _is_text(arr):
        x, non_numeric = _parse(_unquoted(arr) if unquote else arr)
    elif (pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type)
          or pa.types.is_decimal(arr.type)):
        x = np.array(arr.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False),
                     dtype=np.float64)
        non_numeric = np.zeros(len(arr), dtype=np.bool_)
    else:
        return None
    missing = (nulls | np.isnan(x)) & ~non_numeric
    label = "missing values" if nulls.any() else "missing values (NaN)"
    return Cells(x=x, missing=missing, non_numeric=non_numeric, non_finite=np.isinf(x),
                 missing_label=label)


def shown(arr: pa.Array, rows: NDArray[np.int64]) -> list[object]:
    """The raw values of ``rows`` for an error message (``None`` for a missing cell)."""
    out: list[object] = []
    for i in rows:
        v = arr[int(i)].as_py()
        out.append(v.decode("utf-8", "replace") if isinstance(v, bytes) else v)
    return out


def column_error(
    path: object, column: str, problem: str, rows: NDArray[np.int64], values: list[object]
) -> SchemaMismatch:
    shown = ", ".join(
        str(r) if v is None else f"{r} ({v!r})"
        for r, v in zip(rows[:MAX_SHOWN], values + [None] * MAX_SHOWN, strict=False)
    )
    return SchemaMismatch(
        f"{path}: column {column!r}: {problem}; first bad rows: {shown} "
        f"(data rows counted from 1, header excluded)",
        path=str(path),
        column=column,
        rows=[int(r) for r in rows[:MAX_SHOWN]],
    )


def joined_error(errors: list[SchemaMismatch]) -> SchemaMismatch:
    """One error naming every bad column, the first column's context kept."""
    if len(errors) == 1:
        return errors[0]
    first = errors[0]
    text = str(first) + "".join("; " + str(e).split(": ", 1)[1] for e in errors[1:])
    return SchemaMismatch(text, **first.context,
                          columns=[e.context.get("column") for e in errors])
