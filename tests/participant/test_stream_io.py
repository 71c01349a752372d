"""Record and label parsing of `fedod-participant stream` (local only)."""

from __future__ import annotations

import numpy as np

from participant.stream_io import RecordParser, parse_label


def test_json_lines_and_csv_records_with_ids_or_positions() -> None:
    p = RecordParser(["a", "b"], "id")
    rid, x = p.parse('{"id": "x1", "a": 1, "b": "2.5"}')  # type: ignore[misc]
    assert rid == "x1" and np.array_equal(x, [1.0, 2.5])
    assert p.parse('{"a": 3, "b": 4}')[0] == "#2"  # type: ignore[index]
    assert p.parse('{"a": "x", "b": 4}') is None and p.bad == 1
    assert p.parse('{"a": NaN, "b": 4}') is None and p.bad == 2
    assert p.parse("") is None
    c = RecordParser(["a", "b"], "id", prefix="f.csv")
    assert c.parse("b,a,id") is None  # the header, any column order
    rid, x = c.parse("2,1,")  # type: ignore[misc]
    assert rid == "f.csv#1" and np.array_equal(x, [1.0, 2.0])


def test_labels() -> None:
    assert [parse_label(v) for v in ("1", "+1", "Outlier", "0", "-1", "inlier", "maybe")] == \
        [1, 1, 1, -1, -1, -1, None]
