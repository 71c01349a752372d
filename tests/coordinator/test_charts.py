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
