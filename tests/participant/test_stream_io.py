"""Record and label parsing of `fedod-participant stream` (local only)."""

from __future__ import annotations

import numpy as np

from participant.online.io import RecordParser, parse_label


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


def test_unexpected_columns_stop_the_stream_unless_ignored() -> None:
    import pytest

    from common.errors import SchemaMismatch

    with pytest.raises(SchemaMismatch, match="unexpected column.*'label'.*--ignore-column"):
        RecordParser(["a"], "id").parse('{"id": "x", "a": 1, "label": 0}')
    with pytest.raises(SchemaMismatch, match="CSV header: unexpected column"):
        RecordParser(["a"], "id").parse("id,a,label")
    p = RecordParser(["a"], "id", ignore=("label",))
    rid, x = p.parse('{"id": "x", "a": 1, "label": 0}')  # type: ignore[misc]
    assert rid == "x" and np.array_equal(x, [1.0])
    c = RecordParser(["a"], "id", ignore=("label",))
    assert c.parse("label,a") is None
    assert np.array_equal(c.parse("1,2.5")[1], [2.5])  # type: ignore[index]


def test_labels() -> None:
    assert [parse_label(v) for v in ("1", "+1", "Outlier", "0", "-1", "inlier", "maybe")] == \
        [1, 1, 1, -1, -1, -1, None]


def test_ticks_are_read_and_deadlines_interleave_with_records() -> None:
    import threading

    from participant.online.io import Tick, until_deadlines

    p = RecordParser(["a"], "id")
    assert p.parse('{"tick": 7}') == Tick(7)
    assert p.parse('{"tick": "7"}') is None and p.bad == 1  # not a tick, not a record
    go = threading.Event()

    def records():  # nothing arrives until the test has seen a deadline pass
        go.wait()
        yield ("r1", np.zeros(1))

    events = until_deadlines(records(), lambda: 0.0)
    assert next(events) is None  # the window ended before any record: act on the schedule
    go.set()
    rest = [e for e in events if e is not None]
    assert [r for r, _ in rest] == ["r1"]
