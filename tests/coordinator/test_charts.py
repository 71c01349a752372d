"""Dashboard charts: running totals and the SVG's machine-readable points."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from coordinator.dashboard.charts import Series, cumulative_series, step_chart

T0 = datetime(2026, 11, 1, 9, tzinfo=UTC)


def test_cumulative_series_sums_per_label_in_time_order():
    rows = [("b", T0 + timedelta(hours=2), Decimal("0.5")),
            ("a", T0 + timedelta(hours=1), Decimal("1")),
            ("b", T0, Decimal("0.25"))]
    assert cumulative_series(rows) == [
        Series("a", ((T0 + timedelta(hours=1), Decimal("1")),)),
        Series("b", ((T0, Decimal("0.25")), (T0 + timedelta(hours=2), Decimal("0.75")))),
    ]


def test_chart_points_carry_exact_values_and_the_cap():
    series = [Series("st-mary", ((T0, Decimal("0.5")), (T0 + timedelta(days=1), Decimal("1.5"))))]
    svg = step_chart(series, title="ε <over> time", cap=Decimal(3))
    assert re.findall(r'data-eps="([^"]+)"', svg) == ["0.5", "1.5"]
    assert 'data-cap="3"' in svg
    assert "ε &lt;over&gt; time" in svg  # escaped
    ys = [float(v) for v in re.findall(r'<circle class="point" cx="[^"]+" cy="([^"]+)"', svg)]
    assert ys[0] > ys[1]  # more spent is drawn higher


def test_empty_chart_says_so():
    assert "no charges yet" in step_chart([], title="t")


def _ticks(svg: str) -> list[str]:
    return re.findall(r'class="tick-x"[^>]*>([^<]+)<', svg)


def test_one_panel_per_series_on_one_scale():
    a = Series("a", ((T0, Decimal("1")),))
    b = Series("b", ((T0 + timedelta(hours=1), Decimal("4")),))
    html = step_chart([a, b], title="t")
    panels = re.findall(r'<figure class="panel" data-series="([^"]+)"', html)
    assert panels == ["a", "b"]
    # one scale: the top tick of every panel is the largest value of all
    assert re.findall(r'class="tick-y"[^>]*>([^<]+)<', html) == ["0", "2", "4"] * 2
    assert "2 panels on one scale" in html


def test_time_ticks_are_short_and_never_repeat():
    def chart(span: timedelta) -> str:
        return step_chart([Series("a", ((T0, Decimal(1)), (T0 + span, Decimal(2))))], title="t")

    assert _ticks(chart(timedelta(seconds=20))) == ["09:00:00", "09:00:20"]
    assert _ticks(chart(timedelta(hours=3))) == ["09:00", "12:00"]
    assert _ticks(chart(timedelta(days=3))) == ["01 Nov", "04 Nov"]
    assert _ticks(chart(timedelta(0))) == ["09:00:00"]  # one instant: one tick


def test_peak_series_follows_the_highest_participant_never_a_sum():
    from coordinator.dashboard.charts import peak_series

    rows = [("s", "a", T0, Decimal(1)), ("s", "b", T0 + timedelta(hours=1), Decimal("0.5")),
            ("s", "b", T0 + timedelta(hours=2), Decimal(1)),
            ("s", "a", T0 + timedelta(hours=3), Decimal("0.25"))]
    assert peak_series(rows) == [Series("s", ((T0, Decimal(1)),
                                              (T0 + timedelta(hours=2), Decimal("1.5"))))]


def test_a_sub_second_span_across_a_second_boundary_fills_the_panel():
    """Two charges 0.2 s apart on either side of a second: two different labels, so the end
    tick must sit at the right edge, not 0.2 of the way along (where it covered the start
    tick on the dashboard when a test ran fast)."""
    start = T0 - timedelta(milliseconds=100)
    svg = step_chart([Series("a", ((start, Decimal(1)),
                                   (start + timedelta(milliseconds=200), Decimal(2))))], title="t")
    assert _ticks(svg) == ["08:59:59", "09:00:00"]
    xs = [float(x) for x in re.findall(r'class="tick-x" x="([^"]+)"', svg)]
    assert len(xs) == 2 and xs[1] - xs[0] > 200  # start at the left edge, end at the right
