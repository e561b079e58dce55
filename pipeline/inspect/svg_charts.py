"""The run page's charts, drawn as SVG text: bars, horizontal bars and lines.

A matplotlib figure cost a run's page about 0.15 s to lay out and encode as PNG, and the
page has 22 (one per feature): about 3 s of every run's last seconds, plus 0.2 s to
import matplotlib. These charts are the same bars, lines, axes, titles and legends,
written directly: well under a millisecond each. They are embedded as
`data:image/svg+xml` URIs, as the PNGs were as `data:image/png` ones, so the page stays
one self-contained file.
"""

from __future__ import annotations

import base64
import html
import math
import re
from typing import Iterable, List, Optional, Sequence, Tuple

# The size of a small chart, in pixels (the PNGs it replaces were 3.4 x 2.1 inches at
# 90 dpi), and the width of a wide one (6.5 inches).
WIDTH, HEIGHT = 306, 189
WIDE = 585
# A wide chart's height per row of bars, and its margins above and below them.
_ROW, _WIDE_TOP, _WIDE_BOTTOM = 24, 12, 44
# About how wide a character of the labels is, at their size; the most characters of a
# horizontal bar's name shown.
_CHAR = 6.2
_LONGEST_NAME = 40
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
    top_value = _nice_top(_largest(value for _, _, values in series for value in values))
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
                     f'transform="rotate(-40 {x:.1f} {bottom + 10})">{_text(name)}</text>')
    parts += _legend([(label, color, 1.0) for label, color, _ in series])
    return _data_uri(parts)


def histogram(title: str, series: Sequence[HistogramSeries]) -> str:
    """Overlaid histograms on one numeric axis, each bucket a bar from its low to its
    high bound, half transparent."""
    bottom = HEIGHT - _BOTTOM_NUMBERS
    width = WIDTH - _LEFT - _RIGHT
    # Buckets with an infinite or undefined bound have no place on the axis.
    series = [(label, color, [b for b in of_series if math.isfinite(b[0]) and math.isfinite(b[1])])
              for label, color, of_series in series]
    buckets = [bucket for _, _, of_series in series for bucket in of_series]
    top_value = _nice_top(_largest(fraction for _, _, fraction in buckets))
    low = min((bucket[0] for bucket in buckets), default=0.0)
    high = max((bucket[1] for bucket in buckets), default=1.0)
    if high <= low:  # one value: a bar in the middle of an axis around it
        low, high = low - 0.5, high + 0.5
    span = high - low
    parts = _frame(title, top_value, bottom)
    for _, color, of_series in series:
        for start, end, fraction in of_series:
            x = _LEFT + (start - low) / span * width
            parts.append(_bar(x, max((end - start) / span * width, 2.0), fraction, top_value, bottom, color, 0.5))
    for text, anchor, x in zip(_bounds(low, high), ("start", "end"), (_LEFT, WIDTH - _RIGHT)):
        parts.append(f'<text x="{x}" y="{bottom + 12}" font-size="8" text-anchor="{anchor}">{text}</text>')
    parts += _legend([(label, color, 0.5) for label, color, _ in series])
    return _data_uri(parts)


def horizontal_bars(names: Sequence[str], series: Sequence[Tuple[str, Sequence[str], Sequence[float]]],
                    x_label: str, low: float = 0.0, high: float = 0.0, marker: float = 0.0) -> str:
    """A row per name, one bar per series in it (each bar its own color), from `low` to
    `high` on the x axis (`high` 0: the largest value, rounded up); a vertical line at
    `marker` (0: none); a legend of the series' labels that are not empty, under the axis.
    Names are cut to `_LONGEST_NAME` characters."""
    names = [name[:_LONGEST_NAME] for name in names]
    legend = [(label, colors[0], 1.0) for label, colors, _ in series if label and colors]
    left = 12 + _CHAR * max((len(name) for name in names), default=0)
    height = _WIDE_TOP + _ROW * max(len(names), 1) + _WIDE_BOTTOM + (16 if legend else 0)
    bottom = _WIDE_TOP + _ROW * max(len(names), 1)
    high = high or _nice_top(_largest(value for _, _, values in series for value in values))
    span = (high - low) or 1.0
    width = WIDE - left - _RIGHT

    def x_of(value: float) -> float:
        return left + max(0.0, min((value - low) / span, 1.0)) * width

    parts = []
    bar = 0.8 * _ROW / max(len(series), 1)
    for index, (_, colors, values) in enumerate(series):
        for row, (value, color) in enumerate(zip(values, colors)):
            y = _WIDE_TOP + row * _ROW + 0.1 * _ROW + index * bar
            parts.append(f'<rect x="{left:.2f}" y="{y:.2f}" width="{x_of(value) - left:.2f}" height="{bar:.2f}" '
                         f'fill="{color}"><title>{value:.4g}</title></rect>')
    for row, name in enumerate(names):
        y = _WIDE_TOP + (row + 0.5) * _ROW + 4
        parts.append(f'<text x="{left - 5:.1f}" y="{y:.1f}" font-size="10" text-anchor="end">'
                     f'{_text(name)}</text>')
    for tick in _ticks(low, high):
        parts.append(f'<line x1="{x_of(tick):.1f}" x2="{x_of(tick):.1f}" y1="{bottom}" y2="{bottom + 4}" '
                     f'stroke="{_AXIS_COLOR}"/><text x="{x_of(tick):.1f}" y="{bottom + 15}" font-size="9" '
                     f'text-anchor="middle">{tick:g}</text>')
    parts.append(f'<text x="{left + width / 2:.1f}" y="{bottom + 32}" font-size="10" '
                 f'text-anchor="middle">{_text(x_label)}</text>')
    parts.append(f'<rect x="{left:.1f}" y="{_WIDE_TOP}" width="{width:.1f}" height="{bottom - _WIDE_TOP}" '
                 f'fill="none" stroke="{_AXIS_COLOR}"/>')
    if marker:
        parts.append(f'<line x1="{x_of(marker):.1f}" x2="{x_of(marker):.1f}" y1="{_WIDE_TOP}" y2="{bottom}" '
                     'stroke="black"/>')
    parts += _legend_row(legend, left, bottom + 40)
    return _data_uri(parts, WIDE, height)


# One line of a line chart: its label, its color, its values (one per x), and the
# axis it is read on ("left" or "right").
Line = Tuple[str, str, Sequence[float], str]


def lines(x_values: Sequence[int], series: Sequence[Line], x_label: str, left_label: str, right_label: str = "",
          marker: int = 0, marker_label: str = "") -> str:
    """Lines with a dot at each point over integer `x_values`, on a left axis and, for the
    series that say so, a right one, each scaled to its own values; a dashed vertical
    line at `marker` (0: none)."""
    height, left, right, top, bottom = 270, 58, 62, 12, 270 - 58
    width = WIDE - left - right
    first, last = (min(x_values), max(x_values)) if x_values else (0, 1)

    def x_of(x: float) -> float:
        return left + (x - first) / ((last - first) or 1) * width

    parts = [f'<rect x="{left}" y="{top}" width="{width}" height="{bottom - top}" fill="none" '
             f'stroke="{_AXIS_COLOR}"/>']
    for x in x_values:
        parts.append(f'<text x="{x_of(x):.1f}" y="{bottom + 14}" font-size="9" text-anchor="middle">{x}</text>')
    parts.append(f'<text x="{left + width / 2:.1f}" y="{bottom + 32}" font-size="10" '
                 f'text-anchor="middle">{_text(x_label)}</text>')
    for side, label, axis_x, anchor in (("left", left_label, left - 4, "end"),
                                        ("right", right_label, WIDE - right + 4, "start")):
        values = [v for _, _, of_line, line_side in series if line_side == side for v in of_line
                  if math.isfinite(v)]
        if not values:
            continue
        low, high = min(values), max(values)
        pad = (high - low) * 0.1 or abs(high) * 0.1 or 1.0
        low, high = low - pad, high + pad

        def y_of(value: float, low: float = low, high: float = high) -> float:
            return bottom - (value - low) / (high - low) * (bottom - top)

        for tick in (low + pad, (low + high) / 2, high - pad):
            parts.append(f'<text x="{axis_x}" y="{y_of(tick) + 3:.1f}" font-size="9" '
                         f'text-anchor="{anchor}">{tick:.4g}</text>')
        title_x = 12 if side == "left" else WIDE - 10
        middle = (top + bottom) / 2
        parts.append(f'<text x="{title_x}" y="{middle:.1f}" font-size="10" text-anchor="middle" '
                     f'transform="rotate(-90 {title_x} {middle:.1f})">{_text(label)}</text>')
        for _, color, of_line, line_side in series:
            if line_side != side:
                continue
            # A diverged value (NaN, infinite) is left out, and the line broken there.
            shown = [(x, v) if math.isfinite(v) else None for x, v in zip(x_values, of_line)]
            for run in _runs(shown):
                points = " ".join(f"{x_of(x):.1f},{y_of(v):.1f}" for x, v in run)
                parts.append(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="1.5"/>')
            parts += [f'<circle cx="{x_of(x):.1f}" cy="{y_of(v):.1f}" r="3" fill="{color}"><title>{v:.4g}</title>'
                      '</circle>' for x, v in (point for point in shown if point is not None)]
    legend = [(label, color, 1.0) for label, color, _, _ in series]
    if marker and first <= marker <= last:
        parts.append(f'<line x1="{x_of(marker):.1f}" x2="{x_of(marker):.1f}" y1="{top}" y2="{bottom}" '
                     'stroke="#9a9a9a" stroke-dasharray="5,3"/>')
        legend.append((marker_label, "#9a9a9a", 1.0))
    parts += _legend_row(legend, left, bottom + 40)
    return _data_uri(parts, WIDE, height)


def _runs(points: Sequence[Optional[Tuple[int, float]]]) -> List[List[Tuple[int, float]]]:
    """The stretches of `points` between the Nones."""
    runs: List[List[Tuple[int, float]]] = [[]]
    for point in points:
        if point is None:
            runs.append([])
        else:
            runs[-1].append(point)
    return [run for run in runs if run]


def _largest(values: Iterable[float]) -> float:
    """The largest finite value of `values` (0 if none): a NaN or infinite one has no height."""
    return max((value for value in values if math.isfinite(value)), default=0.0)


def _ticks(low: float, high: float) -> List[float]:
    """About five round values from `low` to `high`."""
    step = _nice_top((high - low) / 5) if high > low else 1.0
    first = math.ceil(low / step - 1e-9)
    return [round((first + i) * step, 10) for i in range(int((high - low) / step + 1e-9) + 1)
            if (first + i) * step <= high + 1e-9]


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
    parts = [f'<text x="{WIDTH / 2:.1f}" y="14" font-size="11" text-anchor="middle">{_text(title)}</text>']
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


def _legend(entries: Sequence[Tuple[str, str, float]], x: float = WIDTH - _RIGHT - 70,
            top: float = _TOP + 4) -> List[str]:
    parts = []
    for row, (label, color, opacity) in enumerate(entries):
        y = top + 12 * row
        parts.append(f'<rect x="{x:.1f}" y="{y}" width="9" height="9" fill="{color}" fill-opacity="{opacity}"/>')
        parts.append(f'<text x="{x + 13:.1f}" y="{y + 8}" font-size="9">{_text(label)}</text>')
    return parts


def _legend_row(entries: Sequence[Tuple[str, str, float]], left: float, top: float) -> List[str]:
    """A legend in one row under a chart, where no bar or line runs through it."""
    parts, x = [], float(left)
    for label, color, opacity in entries:
        parts += _legend([(label, color, opacity)], x, top)
        x += 30 + _CHAR * len(label)
    return parts


# What XML does not allow in text (control characters, lone surrogates).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]")


def _text(value: str) -> str:
    """`value` as SVG text: escaped, each character XML does not allow replaced."""
    return html.escape(_NOT_XML.sub("\ufffd", value))


def _data_uri(parts: List[str], width: int = WIDTH, height: int = HEIGHT) -> str:
    text = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height:.0f}" '
            f'viewBox="0 0 {width} {height:.0f}" font-family="sans-serif">' + "".join(parts) + "</svg>")
    return "data:image/svg+xml;base64," + base64.b64encode(text.encode()).decode()
