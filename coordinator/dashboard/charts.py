"""Server-rendered SVG charts for the dashboard (no JavaScript, no external assets).

:func:`cumulative_series` turns itemised charges into running totals; :func:`step_chart`
draws them as step lines, ε spent over time. Every point carries its exact values in
``data-`` attributes (series, time, cumulative ε) so tests and scrapers can read the chart
back and compare it with the ledger.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from html import escape

from common.budget import plain_decimal

PALETTE = ("#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280", "#2c7a7b", "#975a16",
           "#4a5568")
_W, _H, _LEFT, _RIGHT, _TOP, _BOTTOM = 960, 240, 52, 12, 12, 28


@dataclass(frozen=True)
class Series:
    """One line: a label and its (time, cumulative ε) points in time order."""

    label: str
    points: tuple[tuple[datetime, Decimal], ...]


def cumulative_series(charges: Iterable[tuple[str, datetime, Decimal]]) -> list[Series]:
    """Running ε totals per label from ``(label, time, ε charged)`` rows, labels sorted."""
    totals: dict[str, Decimal] = {}
    points: dict[str, list[tuple[datetime, Decimal]]] = {}
    for label, when, epsilon in sorted(charges, key=lambda c: c[1]):
        totals[label] = totals.get(label, Decimal(0)) + epsilon
        points.setdefault(label, []).append((when, totals[label]))
    return [Series(label, tuple(points[label])) for label in sorted(points)]


def step_chart(series: Sequence[Series], *, title: str, cap: Decimal | None = None) -> str:
    """An SVG step chart of cumulative ε over time, with an optional dashed cap line."""
    if not any(s.points for s in series):
        return f'<p class="empty">{escape(title)}: no charges yet.</p>'
    times = [t for s in series for t, _ in s.points]
    t0, t1 = min(times), max(times)
    span = max((t1 - t0).total_seconds(), 1.0)
    top = max([v for s in series for _, v in s.points] + [cap or Decimal(0)])
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x(t: datetime) -> float:
        return _LEFT + (t - t0).total_seconds() / span * plot_w

    def y(v: Decimal) -> float:
        return _TOP + plot_h - float(v / top) * plot_h if top else _TOP + plot_h

    parts = [
        f'<svg class="chart" viewBox="0 0 {_W} {_H}" role="img" aria-label="{escape(title)}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>',
        f'<line x1="{_LEFT}" y1="{_TOP + plot_h}" x2="{_W - _RIGHT}" y2="{_TOP + plot_h}" '
        'stroke="#9aa5b1"/>',
    ]
    for tick in (Decimal(0), top / 2, top):
        label = plain_decimal(tick.quantize(Decimal("0.001")))
        parts.append(f'<text x="{_LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end" '
                     f'font-size="11" fill="#616e7c">{label}</text>')
    for t, anchor in ((t0, "start"), (t1, "end")):
        parts.append(f'<text x="{x(t):.1f}" y="{_H - 8}" text-anchor="{anchor}" font-size="11" '
                     f'fill="#616e7c">{t:%Y-%m-%d %H:%M}</text>')
    if cap is not None:
        parts.append(f'<line class="cap" x1="{_LEFT}" y1="{y(cap):.1f}" x2="{_W - _RIGHT}" '
                     f'y2="{y(cap):.1f}" stroke="#c53030" stroke-dasharray="5 4" '
                     f'data-cap="{plain_decimal(cap)}"/>')
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        coords, last = [], Decimal(0)
        for t, v in s.points:
            coords += [f"{x(t):.1f},{y(last):.1f}", f"{x(t):.1f},{y(v):.1f}"]
            last = v
        coords.append(f"{_W - _RIGHT},{y(last):.1f}")
        label = escape(s.label)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" '
                     f'points="{" ".join(coords)}"><title>{label}</title></polyline>')
        parts += [
            f'<circle class="point" cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" fill="{color}" '
            f'data-series="{label}" data-t="{t.isoformat()}" data-eps="{plain_decimal(v)}">'
            f"<title>{label}: ε {plain_decimal(v)} at {t:%Y-%m-%d %H:%M:%S}</title></circle>"
            for t, v in s.points
        ]
    parts.append("</svg>")
    legend = "".join(
        f'<span class="key"><i style="background:{PALETTE[i % len(PALETTE)]}"></i>'
        f"{escape(s.label)}</span>"
        for i, s in enumerate(series)
    )
    return f'<figure class="chart">{"".join(parts)}<figcaption>{legend}</figcaption></figure>'

