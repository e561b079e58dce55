"""Small bar charts drawn as SVG text, for the plots a page has many of (one per feature).

A matplotlib figure costs a page about 0.15 s to lay out and encode as PNG; a run's page
has one per feature (18 of its 22 plots, about 2.5 s of a run's last seconds). These
charts are the same bars, axes, title and legend, written directly: well under a
millisecond each. They are embedded as `data:image/svg+xml` URIs, as the PNGs are as
`data:image/png` ones, so the page stays one self-contained file.
"""

from __future__ import annotations

import base64
import html
import math
from typing import List, Sequence, Tuple

# The size of a chart, in pixels (the PNGs it replaces were 3.4 x 2.1 inches at 90 dpi).
WIDTH, HEIGHT = 306, 189
_LEFT, _RIGHT, _TOP = 42, 8, 22
# The bottom margin under the plot area: numbers, or names written at a slant.
_BOTTOM_NUMBERS, _BOTTOM_NAMES = 22, 52
_AXIS_COLOR, _GRID_COLOR = "#444", "#ddd"

# One series of a chart: its legend label, its color, and its values (fractions).
Series = Tuple[str, str, Sequence[float]]
# One series of a histogram: label, color, and (low, high, fraction) buckets.
HistogramSeries = Tuple[str, str, Sequence[Tuple[float, float, float]]]


def categories(title: str, names: Sequence[str], series: Sequence[Series]) -> str:
    """Grouped vertical bars: for each of `names`, one bar per series, side by side."""
    bottom = HEIGHT - _BOTTOM_NAMES
    width = WIDTH - _LEFT - _RIGHT
    top_value = _nice_top(max((value for _, _, values in series for value in values), default=0.0))
    parts = _frame(title, top_value, bottom)
    group = width / max(len(names), 1)
    bar = 0.8 * group / max(len(series), 1)
    for index, (_, color, values) in enumerate(series):
        for position, value in enumerate(values):
            x = _LEFT + position * group + 0.1 * group + index * bar
            parts.append(_bar(x, bar, value, top_value, bottom, color))
    for position, name in enumerate(names):
        x = _LEFT + (position + 0.5) * group
        parts.append(f'<text x="{x:.1f}" y="{bottom + 10}" font-size="8" text-anchor="end" '
                     f'transform="rotate(-40 {x:.1f} {bottom + 10})">{html.escape(name)}</text>')
    parts += _legend([(label, color, 1.0) for label, color, _ in series])
    return _data_uri(parts)


def histogram(title: str, series: Sequence[HistogramSeries]) -> str:
    """Overlaid histograms on one numeric axis, each bucket a bar from its low to its
    high bound, half transparent."""
    bottom = HEIGHT - _BOTTOM_NUMBERS
    width = WIDTH - _LEFT - _RIGHT
    buckets = [bucket for _, _, of_series in series for bucket in of_series]
    top_value = _nice_top(max((fraction for _, _, fraction in buckets), default=0.0))
    low = min((bucket[0] for bucket in buckets), default=0.0)
    high = max((bucket[1] for bucket in buckets), default=1.0)
    span = (high - low) or 1.0
    parts = _frame(title, top_value, bottom)
    for _, color, of_series in series:
        for start, end, fraction in of_series:
            x = _LEFT + (start - low) / span * width
            parts.append(_bar(x, max((end - start) / span * width, 1.0), fraction, top_value, bottom, color, 0.5))
    for text, anchor, x in zip(_bounds(low, high), ("start", "end"), (_LEFT, WIDTH - _RIGHT)):
        parts.append(f'<text x="{x}" y="{bottom + 12}" font-size="8" text-anchor="{anchor}">{text}</text>')
    parts += _legend([(label, color, 0.5) for label, color, _ in series])
    return _data_uri(parts)


def _bounds(low: float, high: float) -> Tuple[str, str]:
    """`low` and `high` written with 4 significant digits, or as many more as tell them apart."""
    for digits in range(4, 13):
        texts = (f"{low:.{digits}g}", f"{high:.{digits}g}")
        if texts[0] != texts[1]:
            break
    return texts


def _nice_top(value: float) -> float:
    """The smallest of 1, 2, 2.5 and 5 times a power of ten at or above `value` (1 for 0)."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    step = 10 ** math.floor(math.log10(value))
    return next(m * step for m in (1, 2, 2.5, 5, 10) if m * step >= value * (1 - 1e-12))


def _frame(title: str, top_value: float, bottom: float) -> List[str]:
    """The title, the y axis (0, half and top, with grid lines) and the x axis line."""
    parts = [f'<text x="{WIDTH / 2:.1f}" y="14" font-size="11" text-anchor="middle">{html.escape(title)}</text>']
    for fraction in (0.0, 0.5, 1.0):
        y = bottom - fraction * (bottom - _TOP)
        parts.append(f'<line x1="{_LEFT}" x2="{WIDTH - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="{_GRID_COLOR}"/>')
        parts.append(f'<text x="{_LEFT - 4}" y="{y + 3:.1f}" font-size="8" text-anchor="end">'
                     f'{fraction * top_value:.3g}</text>')
    middle = (bottom + _TOP) / 2
    parts.append(f'<text x="10" y="{middle:.1f}" font-size="8" text-anchor="middle" '
                 f'transform="rotate(-90 10 {middle:.1f})">fraction</text>')
    parts.append(f'<line x1="{_LEFT}" x2="{WIDTH - _RIGHT}" y1="{bottom}" y2="{bottom}" stroke="{_AXIS_COLOR}"/>')
    parts.append(f'<line x1="{_LEFT}" x2="{_LEFT}" y1="{_TOP}" y2="{bottom}" stroke="{_AXIS_COLOR}"/>')
    return parts


def _bar(x: float, width: float, value: float, top_value: float, bottom: float, color: str,
         opacity: float = 1.0) -> str:
    height = max(0.0, min(value / top_value, 1.0)) * (bottom - _TOP)
    return (f'<rect x="{x:.2f}" y="{bottom - height:.2f}" width="{width:.2f}" height="{height:.2f}" '
            f'fill="{color}" fill-opacity="{opacity}"><title>{value:.4g}</title></rect>')


def _legend(entries: Sequence[Tuple[str, str, float]]) -> List[str]:
    parts = []
    for row, (label, color, opacity) in enumerate(entries):
        y = _TOP + 4 + 12 * row
        parts.append(f'<rect x="{WIDTH - _RIGHT - 70}" y="{y}" width="9" height="9" fill="{color}" '
                     f'fill-opacity="{opacity}"/>')
        parts.append(f'<text x="{WIDTH - _RIGHT - 57}" y="{y + 8}" font-size="9">{html.escape(label)}</text>')
    return parts


def _data_uri(parts: List[str]) -> str:
    text = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif">' + "".join(parts) + "</svg>")
    return "data:image/svg+xml;base64," + base64.b64encode(text.encode()).decode()
