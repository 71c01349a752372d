"""Server-rendered SVG charts for the dashboard (no JavaScript, no external assets).

:func:`cumulative_series` turns itemised charges into running totals; :func:`step_chart`
draws them as small multiples: one small step chart per series (participant or study), all on
the same ε scale and time span, so twenty lines never hide each other and each is named
above its own panel. A panel's SVG is narrow (``_W`` user units, shown at about that many CSS
pixels), so its tick labels stay legible on a phone; the time axis has two ticks (start and
end) in a short format, the full span is written under the panels. Every point carries its
exact values in ``data-`` attributes (series, time, cumulative ε) so tests and scrapers can
read the chart back and compare it with the ledger.
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
_W, _H, _LEFT, _RIGHT, _TOP, _BOTTOM = 320, 132, 50, 10, 10, 26
_FONT = 13


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


@dataclass(frozen=True)
class _Frame:
    """The shared scale of all panels: time span and ε range."""

    t0: datetime
    t1: datetime
    top: Decimal

    def x(self, t: datetime) -> float:
        """The span always fills the plot width (a sub-second span too: clamping it to one
        second once left the end tick mid-panel, on top of the start tick)."""
        span = (self.t1 - self.t0).total_seconds()
        if span <= 0:
            return float(_LEFT)
        return _LEFT + (t - self.t0).total_seconds() / span * (_W - _LEFT - _RIGHT)

    def y(self, v: Decimal) -> float:
        plot_h = _H - _TOP - _BOTTOM
        return _TOP + plot_h - (float(v / self.top) * plot_h if self.top else 0.0)

    def time_ticks(self) -> list[tuple[datetime, str, str]]:
        """Start and end: ``HH:MM:SS`` within one minute, ``HH:MM`` within one UTC day, else
        ``DD Mon``; one tick if both read the same."""
        short = ("%d %b" if self.t0.date() != self.t1.date()
                 else "%H:%M:%S" if (self.t1 - self.t0).total_seconds() < 60 else "%H:%M")
        first, last = f"{self.t0:{short}}", f"{self.t1:{short}}"
        ticks = [(self.t0, first, "start")]
        return ticks + ([(self.t1, last, "end")] if last != first else [])


def _text(x: float, y: float, label: str, anchor: str, cls: str) -> str:
    return (f'<text class="{cls}" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" '
            f'font-size="{_FONT}" fill="#52606d">{escape(label)}</text>')


def _panel(s: Series, color: str, frame: _Frame, cap: Decimal | None) -> str:
    x, y = frame.x, frame.y
    parts = [f'<line x1="{_LEFT}" y1="{y(Decimal(0)):.1f}" x2="{_W - _RIGHT}" '
             f'y2="{y(Decimal(0)):.1f}" stroke="#9aa5b1"/>']
    for tick in (Decimal(0), frame.top / 2, frame.top):
        label = plain_decimal(tick.quantize(Decimal("0.001")).normalize())
        parts.append(_text(_LEFT - 6, y(tick) + 4, label, "end", "tick-y"))
    parts += [_text(x(t), _H - 7, label, anchor, "tick-x") for t, label, anchor in
              frame.time_ticks()]
    if cap is not None:
        parts.append(f'<line class="cap" x1="{_LEFT}" y1="{y(cap):.1f}" x2="{_W - _RIGHT}" '
                     f'y2="{y(cap):.1f}" stroke="#c53030" stroke-dasharray="5 4" '
                     f'data-cap="{plain_decimal(cap)}"/>')
    coords, last = [], Decimal(0)
    for t, v in s.points:
        coords += [f"{x(t):.1f},{y(last):.1f}", f"{x(t):.1f},{y(v):.1f}"]
        last = v
    coords.append(f"{_W - _RIGHT},{y(last):.1f}")
    label = escape(s.label)
    parts.append(f'<polyline class="line" fill="none" stroke="{color}" stroke-width="2" '
                 f'points="{" ".join(coords)}"/>')
    parts += [
        f'<circle class="point" cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" fill="{color}" '
        f'data-series="{label}" data-t="{t.isoformat()}" data-eps="{plain_decimal(v)}">'
        f"<title>{label}: ε {plain_decimal(v)} at {t:%Y-%m-%d %H:%M:%S}</title></circle>"
        for t, v in s.points
    ]
    return (f'<figure class="panel" data-series="{label}"><figcaption><i style="background:'
            f'{color}"></i><span class="name">{label}</span> <b>ε {plain_decimal(last)}</b>'
            f'</figcaption><svg viewBox="0 0 {_W} {_H}" role="img" '
            f'aria-label="{label}: ε {plain_decimal(last)}" xmlns="http://www.w3.org/2000/svg">'
            f'{"".join(parts)}</svg></figure>')


def peak_series(charges: Iterable[tuple[str, str, datetime, Decimal]]) -> list[Series]:
    """Per label, the highest running ε total of any one participant, from ``(label,
    participant, time, ε charged)`` rows: what one participant's records are exposed to in,
    say, a study. Different participants' ε are never added (that sum bounds nothing)."""
    totals: dict[tuple[str, str], Decimal] = {}
    peak: dict[str, Decimal] = {}
    points: dict[str, list[tuple[datetime, Decimal]]] = {}
    for label, who, when, epsilon in sorted(charges, key=lambda c: c[2]):
        totals[label, who] = totals.get((label, who), Decimal(0)) + epsilon
        if totals[label, who] > peak.get(label, Decimal(-1)):
            peak[label] = totals[label, who]
            points.setdefault(label, []).append((when, peak[label]))
    return [Series(label, tuple(points[label])) for label in sorted(points)]


def step_chart(series: Sequence[Series], *, title: str, cap: Decimal | None = None,
               capped: str | None = None) -> str:
    """Small multiples of cumulative ε over time, one panel per series on a shared scale,
    with an optional dashed cap line: in every panel, or only in the panel of the series
    named ``capped`` (the one the cap bounds)."""
    shown = [s for s in series if s.points]
    if not shown:
        return f'<p class="empty">{escape(title)}: no charges yet.</p>'
    times = [t for s in shown for t, _ in s.points]
    top = max([v for s in shown for _, v in s.points] + [cap or Decimal(0)])
    frame = _Frame(min(times), max(times), top)
    panels = "".join(_panel(s, PALETTE[i % len(PALETTE)], frame,
                            cap if capped in (None, s.label) else None)
                     for i, s in enumerate(shown))
    whose = f" (of {capped})" if capped else ""
    note = (f"{len(shown)} panel{'s' if len(shown) > 1 else ''} on one scale: ε from 0 to "
            f"{plain_decimal(top)}, times UTC from {frame.t0:%Y-%m-%d %H:%M:%S} to "
            f"{frame.t1:%Y-%m-%d %H:%M:%S}"
            + (f"; dashed red: the cap{whose}" if cap is not None else "") + ".")
    return (f'<div class="chart" role="group" aria-label="{escape(title)}">'
            f'<div class="panels">{panels}</div><p class="chart-note">{escape(note)}</p></div>')
