"""Inline SVG charts rendered on the server: the selection funnel, a daily series (pass rate,
queue time), a duration histogram, a test's outcome strip and duration sparkline.

Each function returns SVG markup (escaped text, no script) with a ``<title>`` per mark so a
pointer or a screen reader gets the number; the page keeps the same numbers in a table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from markupsafe import Markup

OUTCOME_COLOURS = {
    "passed": "#2e7d32",
    "xpassed": "#66bb6a",
    "failed": "#c62828",
    "error": "#ad1457",
    "crashed": "#6a1b9a",
    "timeout": "#ef6c00",
    "xfailed": "#90a4ae",
    "skipped": "#cfd8dc",
    "not_run": "#eceff1",
}


def _svg(width: int, height: int, body: str, label: str) -> Markup:
    return Markup(
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="100%" role="img" '
        f'aria-label="{escape(label)}" preserveAspectRatio="xMinYMin meet">'
        f"<title>{escape(label)}</title>{body}</svg>"
    )


def funnel(stages: Sequence[tuple[str, int | None, int | None]]) -> Markup:
    """One bar per stage, ``(stage, count_in, count_out)``: the kept part dark, the dropped part
    light, on a log scale so 30,000 and 30 are both visible."""
    if not stages:
        return Markup("")
    top = max([c for _, a, b in stages for c in (a, b) if c] or [1])
    scale = math.log10(top + 1) or 1
    row, width, label_w = 30, 640, 130
    parts = []
    for i, (stage, count_in, count_out) in enumerate(stages):
        y = i * row + 4
        w_in = (math.log10((count_in or 0) + 1) / scale) * (width - label_w - 120)
        w_out = (math.log10((count_out or 0) + 1) / scale) * (width - label_w - 120)
        text = f"{stage}: {count_in if count_in is not None else '?'} in, {count_out if count_out is not None else '?'} out"
        parts.append(
            f"<g><title>{escape(text)}</title>"
            f'<text x="0" y="{y + 16}" class="lbl">{escape(stage)}</text>'
            f'<rect x="{label_w}" y="{y}" width="{w_in:.1f}" height="20" class="bar-in"/>'
            f'<rect x="{label_w}" y="{y}" width="{w_out:.1f}" height="20" class="bar-out"/>'
            f'<text x="{label_w + max(w_in, w_out) + 6:.1f}" y="{y + 16}" class="num">'
            f"{escape(str(count_in if count_in is not None else '?'))} &#8594; "
            f"{escape(str(count_out if count_out is not None else '?'))}</text></g>"
        )
    return _svg(width, len(stages) * row + 8, "".join(parts), "selection funnel (log scale)")


def series(
    points: Sequence[tuple[str, float | None]],
    *,
    label: str,
    unit: str,
    max_value: float | None = None,
) -> Markup:
    """A daily line (``(day, value)``; None: no data that day) with its last value printed."""
    width, height, pad = 320, 90, 24
    values = [v for _, v in points if v is not None]
    if not values:
        return _svg(
            width, height, f'<text x="4" y="50" class="num">no data: {escape(label)}</text>', label
        )
    top = max_value if max_value is not None else (max(values) or 1)
    n = max(len(points) - 1, 1)
    coords = []
    marks = []
    for i, (day, v) in enumerate(points):
        if v is None:
            continue
        x = pad + i * (width - 2 * pad) / n
        y = height - pad - (v / top if top else 0) * (height - 2 * pad)
        coords.append(f"{x:.1f},{y:.1f}")
        marks.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" class="pt"><title>{escape(day)}: {v:.3g} {escape(unit)}</title></circle>'
        )
    last = values[-1]
    body = (
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" class="axis"/>'
        f'<polyline points="{" ".join(coords)}" class="line"/>{"".join(marks)}'
        f'<text x="{pad}" y="14" class="lbl">{escape(label)}: {last:.3g} {escape(unit)} (last)</text>'
        f'<text x="{pad}" y="{height - 6}" class="num">{escape(points[0][0])}</text>'
        f'<text x="{width - pad}" y="{height - 6}" class="num" text-anchor="end">{escape(points[-1][0])}</text>'
    )
    return _svg(width, height, body, label)


def histogram(values: Sequence[float], *, label: str, bins: int = 20) -> Markup:
    """Durations in log-spaced bins (tests take from milliseconds to minutes)."""
    width, height, pad = 640, 120, 24
    if not values:
        return _svg(width, height, '<text x="4" y="60" class="num">no durations yet</text>', label)
    lo = max(min(values), 1e-4)
    hi = max(max(values), lo * 1.0001)
    a, b = math.log10(lo), math.log10(hi)
    counts = [0] * bins
    for v in values:
        i = int((math.log10(max(v, lo)) - a) / (b - a) * bins) if b > a else 0
        counts[min(max(i, 0), bins - 1)] += 1
    top = max(counts)
    bw = (width - 2 * pad) / bins
    bars = []
    for i, c in enumerate(counts):
        h = (c / top) * (height - 2 * pad) if top else 0
        x0, x1 = 10 ** (a + (b - a) * i / bins), 10 ** (a + (b - a) * (i + 1) / bins)
        bars.append(
            f'<rect x="{pad + i * bw:.1f}" y="{height - pad - h:.1f}" width="{bw - 1:.1f}" '
            f'height="{h:.1f}" class="bar-out"><title>{x0:.3g}-{x1:.3g} s: {c} tests</title></rect>'
        )
    body = (
        "".join(bars)
        + f'<text x="{pad}" y="{height - 6}" class="num">{lo:.3g} s</text>'
        + f'<text x="{width - pad}" y="{height - 6}" class="num" text-anchor="end">{hi:.3g} s</text>'
        + f'<text x="{pad}" y="14" class="lbl">{escape(label)} ({len(values)} tests, log scale)</text>'
    )
    return _svg(width, height, body, label)


def outcome_strip(outcomes: Sequence[tuple[str, str]]) -> Markup:
    """One square per run, oldest left: ``(outcome, title)``."""
    size = 14
    cells = "".join(
        f'<rect x="{i * (size + 2)}" y="0" width="{size}" height="{size}" '
        f'fill="{OUTCOME_COLOURS.get(o, "#999")}" class="o-{escape(o)}"><title>{escape(t)}</title></rect>'
        for i, (o, t) in enumerate(outcomes)
    )
    return _svg(max(len(outcomes) * (size + 2), size), size, cells, "outcome per run, oldest first")


def sparkline(values: Sequence[float | None], *, label: str) -> Markup:
    width, height = max(len(values) * 16, 32), 40
    known = [v for v in values if v is not None]
    if not known:
        return Markup("")
    top = max(known) or 1
    pts = [
        f"{i * 16 + 7:.1f},{height - 4 - (v / top) * (height - 8):.1f}"
        for i, v in enumerate(values)
        if v is not None
    ]
    body = f'<polyline points="{" ".join(pts)}" class="line"/>'
    return _svg(width, height, body, f"{label}: max {top:.3g} s")
