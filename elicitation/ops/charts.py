"""Server-rendered SVG charts for the metrics dashboard.

No script and no inline style (the CSP forbids both): data colours are SVG presentation attributes, type and axes
come from static/reviewhub/dashboard.css through class names. Every piece of text that can come from the database
(queue names, reviewer names) is escaped here, and the result is marked safe only after that. Each chart is an
`<svg role="img">` with a title and a description that states its figures, and each mark carries a `<title>` so
hovering shows its exact value.
"""

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
OUTCOME_COLOURS = {
    "accept": "#009E73",
    "decline": "#E69F00",
    "cancel": "#8C8C8C",
    "expired": "#D55E00",
    "withdrawn": "#56B4E9",
}


_ids = itertools.count(1)  # unique ids for aria-labelledby within a page
# Narrower than this (a phone's card), bar charts put each label above its bar instead of beside it.
COMPACT_WIDTH = 560
# Durations are drawn against at least this scale: sub-second figures are near zero, not full-width bars.
MIN_DURATION_SCALE = 10.0


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float]
    colour: str = ""


def colour_for(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def nice_step(raw: float) -> float:
    """1, 2 or 5 x 10^n, the smallest at or above `raw`."""
    if raw <= 0:
        return 1
    exponent = math.floor(math.log10(raw))
    scale: float = 10**exponent  # int ** int is Any to mypy (a negative power gives a float)
    fraction = raw / scale
    return (1 if fraction <= 1 else 2 if fraction <= 2 else 5 if fraction <= 5 else 10) * scale


def ticks(maximum: float, count: int = 4, *, whole: bool = True) -> list[float]:
    """Evenly spaced round ticks from 0 to at least `maximum`, about `count` intervals; whole numbers for counts."""
    step = nice_step(max(maximum, 1e-9) / count)
    if whole:
        step = max(step, 1)
    intervals = max(math.ceil(maximum / step - 1e-9), 1)
    return [step * i for i in range(intervals + 1)]


def format_count(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if 0 < seconds < 1:
        return "<1 s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min" if seconds >= 600 else f"{seconds / 60:.1f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _svg(
    width: int, height: int, title: str, description: str, body: list[str], css_class: str = ""
) -> SafeString:
    chart_id = f"chart-{next(_ids)}"
    return mark_safe(  # noqa: S308 - every dynamic string in `body`, title and description is escaped
        f'<svg class="chart {escape(css_class)}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-labelledby="{chart_id}-t {chart_id}-d" xmlns="http://www.w3.org/2000/svg" '
        f'preserveAspectRatio="xMinYMin meet">'
        f'<title id="{chart_id}-t">{escape(title)}</title><desc id="{chart_id}-d">{escape(description)}</desc>'
        + "".join(body)
        + "</svg>"
    )


def _legend(series: Sequence[Series], x: float, y: float, width: float) -> list[str]:
    """A wrapping row of swatches and names."""
    parts, cx, cy = [], x, y
    for s in series:
        label_width = 18 + 7 * min(len(s.name), 28)
        if cx + label_width > x + width and cx > x:
            cx, cy = x, cy + 18
        parts.append(
            f'<rect x="{_num(cx)}" y="{_num(cy - 9)}" width="10" height="10" rx="2" fill="{escape(s.colour)}"/>'
            f'<text class="legend" x="{_num(cx + 14)}" y="{_num(cy)}">{escape(s.name[:28])}</text>'
        )
        cx += label_width + 12
    return parts


def _legend_height(series: Sequence[Series], width: float) -> int:
    rows, cx = 1, 0.0
    for s in series:
        label_width = 18 + 7 * min(len(s.name), 28)
        if cx + label_width > width and cx > 0:
            rows, cx = rows + 1, 0.0
        cx += label_width + 12
    return rows * 18


def _with_colours(series: Sequence[Series]) -> list[Series]:
    return [s if s.colour else Series(s.name, s.values, colour_for(i)) for i, s in enumerate(series)]


def empty_chart(title: str, message: str = "No data in this period.", width: int = 720) -> SafeString:
    return _svg(
        width,
        80,
        title,
        message,
        [f'<text class="empty" x="{width / 2}" y="45" text-anchor="middle">{escape(message)}</text>'],
        "chart-empty",
    )


LABEL_SPACINGS = [timedelta(hours=h) for h in (1, 2, 3, 6, 12, 24, 48, 96, 168)]


def time_labels(start: datetime, end: datetime, most: int = 8) -> list[tuple[datetime, str]]:
    """Labels on round times (whole hours, midnights) between start and end, at most `most` of them."""
    span = end - start
    spacing = next((s for s in LABEL_SPACINGS if span / s <= most), LABEL_SPACINGS[-1])
    midnight = start.replace(hour=0, minute=0, second=0, microsecond=0)
    steps = math.ceil((start - midnight) / spacing)
    moment = midnight + spacing * steps
    labels = []
    while moment <= end:
        if spacing >= timedelta(days=1):
            text = moment.strftime("%a %d %b")
        elif span > timedelta(days=1) and moment.hour == 0:
            text = moment.strftime("%a %d")
        else:
            text = moment.strftime("%H:%M")
        labels.append((moment, text))
        moment += spacing
    return labels


def line_chart(
    title: str,
    times: Sequence[datetime],
    series: Sequence[Series],
    *,
    width: int = 1100,
    height: int = 280,
    y_label: str = "",
) -> SafeString:
    """Values over time, one line per series. With one more time than values, `times` are interval boundaries
    and each value is drawn as a step holding across its interval (e.g. the peak queue depth in each hour)."""
    series = _with_colours(series)
    if len(times) < 2 or not series:
        return empty_chart(title, width=width)
    legend_h = _legend_height(series, width - 70)
    left, right, top, bottom = 52, 16, 12 + legend_h + 10, 28
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max((max(s.values, default=0) for s in series), default=0)
    y_ticks = ticks(max(peak, 1))
    y_max = y_ticks[-1]
    span = (times[-1] - times[0]).total_seconds() or 1

    def px(t: datetime) -> float:
        return left + plot_w * (t - times[0]).total_seconds() / span

    def py(v: float) -> float:
        return top + plot_h * (1 - v / y_max)

    body = _legend(series, left, 12 + 9, width - left - right)
    for value in y_ticks:
        y = py(value)
        body.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{_num(y)}" y2="{_num(y)}"/>')
        body.append(
            f'<text class="tick" x="{left - 6}" y="{_num(y + 4)}" text-anchor="end">{format_count(value)}</text>'
        )
    for moment, text in time_labels(times[0], times[-1], most=max(3, min(8, plot_w // 110))):
        x = px(moment)
        body.append(f'<line class="grid" x1="{_num(x)}" x2="{_num(x)}" y1="{top}" y2="{top + plot_h}"/>')
        body.append(
            f'<text class="tick" x="{_num(x)}" y="{height - 8}" text-anchor="middle">{escape(text)}</text>'
        )
    body.append(
        f'<line class="axis" x1="{left}" x2="{width - right}" y1="{top + plot_h}" y2="{top + plot_h}"/>'
    )
    if y_label:
        body.append(
            f'<text class="axis-label" x="12" y="{_num(top + plot_h / 2)}" text-anchor="middle" '
            f'transform="rotate(-90 12 {_num(top + plot_h / 2)})">{escape(y_label)}</text>'
        )
    stepped = len(times) == len(series[0].values) + 1
    for s in series:
        points: list[str] = []
        for i, value in enumerate(s.values):
            points.append(f"{_num(px(times[i]))},{_num(py(value))}")
            if stepped:
                points.append(f"{_num(px(times[i + 1]))},{_num(py(value))}")
        body.append(
            f'<polyline class="series" points="{" ".join(points)}" fill="none" stroke="{escape(s.colour)}" '
            f'stroke-width="2" stroke-linejoin="round"><title>{escape(s.name)}: peak '
            f"{format_count(max(s.values, default=0))}, latest {format_count(s.values[-1] if s.values else 0)}"
            f"</title></polyline>"
        )
    description = "; ".join(
        f"{s.name}: peak {format_count(max(s.values, default=0))}, latest {format_count(s.values[-1] if s.values else 0)}"
        for s in series
    )
    return _svg(width, height, title, description, body, "chart-line")


def stacked_bars(
    title: str,
    categories: Sequence[str],
    series: Sequence[Series],
    *,
    horizontal: bool = True,
    width: int = 720,
    value_format: Callable[[float], str] = format_count,
    unit: str = "",
) -> SafeString:
    """Bars per category, each split by series (e.g. outcomes per queue, breaches per day by queue)."""
    series = _with_colours(series)
    totals = [sum(s.values[i] for s in series) for i in range(len(categories))]
    if not categories or not any(totals):
        return empty_chart(title, width=width)
    compact = width < COMPACT_WIDTH
    legend_left = 8 if compact else 20 if not horizontal else 130
    legend_h = _legend_height(series, width - legend_left - 20)
    top = 12 + legend_h + 10
    body = _legend(series, legend_left, 12 + 9, width - legend_left - 20)
    scale_max = ticks(max(totals))[-1]
    if horizontal:
        # Compact: the category's name above its bar, the bar across the card, the total at its end.
        left, right, bar_h, gap = (8, 40, 18, 8) if compact else (130, 70, 20, 10)
        label_h = 16 if compact else 0
        height = top + len(categories) * (label_h + bar_h + gap) + 24
        plot_w = width - left - right
        for value in ticks(max(totals)):
            x = left + plot_w * value / scale_max
            body.append(
                f'<line class="grid" x1="{_num(x)}" x2="{_num(x)}" y1="{top - 4}" y2="{height - 20}"/>'
            )
            body.append(
                f'<text class="tick" x="{_num(x)}" y="{height - 6}" text-anchor="middle">{value_format(value)}</text>'
            )
        for i, category in enumerate(categories):
            y = top + i * (label_h + bar_h + gap) + label_h
            if compact:
                body.append(f'<text class="category" x="{left}" y="{y - 4}">{escape(category[:40])}</text>')
            else:
                body.append(
                    f'<text class="category" x="{left - 8}" y="{_num(y + bar_h / 2 + 4)}" text-anchor="end">'
                    f"{escape(category[:18])}</text>"
                )
            x = float(left)
            for s in series:
                value = s.values[i]
                if value <= 0:
                    continue
                w = plot_w * value / scale_max
                body.append(
                    f'<rect x="{_num(x)}" y="{y}" width="{_num(max(w, 1))}" height="{bar_h}" '
                    f'fill="{escape(s.colour)}"><title>{escape(category)} · {escape(s.name)}: '
                    f"{value_format(value)}{escape(unit)}</title></rect>"
                )
                x += w
            body.append(
                f'<text class="value" x="{_num(x + 6)}" y="{_num(y + bar_h / 2 + 4)}">'
                f"{value_format(totals[i])}</text>"
            )
    else:
        left, right, bottom, height = 44, 12, 26, 240 + legend_h
        plot_w, plot_h = width - left - right, height - top - bottom
        slot = plot_w / len(categories)
        bar_w = max(min(slot * 0.7, 48), 2)
        for value in ticks(max(totals)):
            tick_y = top + plot_h * (1 - value / scale_max)
            body.append(
                f'<line class="grid" x1="{left}" x2="{width - right}" y1="{_num(tick_y)}" y2="{_num(tick_y)}"/>'
            )
            body.append(
                f'<text class="tick" x="{left - 6}" y="{_num(tick_y + 4)}" text-anchor="end">{value_format(value)}</text>'
            )
        label_every = max(1, math.ceil(len(categories) / max(3, min(10, int(plot_w // 60)))))
        for i, category in enumerate(categories):
            x = left + i * slot + (slot - bar_w) / 2
            stack_top = float(top + plot_h)
            for s in series:
                value = s.values[i]
                if value <= 0:
                    continue
                h = plot_h * value / scale_max
                stack_top -= h
                body.append(
                    f'<rect x="{_num(x)}" y="{_num(stack_top)}" width="{_num(bar_w)}" height="{_num(max(h, 1))}" '
                    f'fill="{escape(s.colour)}"><title>{escape(category)} · {escape(s.name)}: '
                    f"{value_format(value)}{escape(unit)}</title></rect>"
                )
            if i % label_every == 0:
                body.append(
                    f'<text class="tick" x="{_num(x + bar_w / 2)}" y="{height - 8}" text-anchor="middle">'
                    f"{escape(category)}</text>"
                )
        body.append(
            f'<line class="axis" x1="{left}" x2="{width - right}" y1="{top + plot_h}" y2="{top + plot_h}"/>'
        )
    description = "; ".join(
        f"{category}: {value_format(total)}{unit}"
        for category, total in zip(categories, totals, strict=True)
        if total  # the empty ones add nothing a listener needs
    )
    return _svg(width, height, title, description, body, "chart-bars")


# The names a percentile chart's wide layout fits in the column left of its bars.
SIDE_LABEL_CHARS = 18


def _fitted(label: str, room: int) -> str:
    """The escaped label, cut to `room` characters with an ellipsis and the whole name as its tooltip."""
    if len(label) <= room:
        return escape(label)
    return f"{escape(label[: room - 1])}…<title>{escape(label)}</title>"


@dataclass(frozen=True)
class Spread:
    label: str
    p50: float | None
    p90: float | None
    count: int


def percentile_chart(title: str, rows: Sequence[Spread], *, width: int = 720) -> SafeString:
    """Per row: a light bar to the 90th percentile with a dark bar to the median over it. A zero is no bar, and the
    scale is at least MIN_DURATION_SCALE, so sub-second figures do not fill the card."""
    rows = [r for r in rows if r.count and r.p90 is not None]
    if not rows:
        return empty_chart(title, width=width)
    # Stacked (a phone's card, or a name longer than the column beside the bars holds: "security → security-oncall
    # claimed"): each row's name and figures on a line above its bar, the bar across the card.
    stacked = width < COMPACT_WIDTH or any(len(r.label) > SIDE_LABEL_CHARS for r in rows)
    left, right, label_h = (8, 8, 16) if stacked else (130, 150, 0)
    bar_h, gap, top = 18, 14, 34
    height = top + len(rows) * (label_h + bar_h + gap) + 20
    plot_w = width - left - right
    longest = max(r.p90 or 0 for r in rows)
    scale_max = max(ticks(longest, whole=False)[-1], MIN_DURATION_SCALE)
    body = _legend(
        [Series("median (p50)", [], "#0072B2"), Series("90th percentile (p90)", [], "#A6CDE8")],
        left,
        18,
        width - left,
    )
    for i, row in enumerate(rows):
        y = top + i * (label_h + bar_h + gap) + label_h
        p50, p90 = row.p50 or 0, row.p90 or 0
        figures = f"{format_duration(p50)} · {format_duration(p90)} (n={row.count})"
        if stacked:
            # What the figures on the right leave of the line, at ~7 px a character.
            room = max(8, int((plot_w - 7 * len(figures)) // 7))
            body.append(
                f'<text class="category" x="{left}" y="{y - 4}">{_fitted(row.label, room)}</text>'
                f'<text class="value" x="{width - right}" y="{y - 4}" text-anchor="end">{figures}</text>'
            )
        else:
            body.append(
                f'<text class="category" x="{left - 8}" y="{_num(y + bar_h / 2 + 4)}" text-anchor="end">'
                f"{escape(row.label)}</text>"
                f'<text class="value" x="{_num(left + plot_w * p90 / scale_max + 6)}" '
                f'y="{_num(y + bar_h / 2 + 4)}">{figures}</text>'
            )
        if p90 > 0:
            body.append(
                f'<rect x="{left}" y="{y}" width="{_num(max(plot_w * p90 / scale_max, 1))}" height="{bar_h}" '
                f'fill="#A6CDE8"><title>{escape(row.label)} p90: {format_duration(p90)}</title></rect>'
            )
        if p50 > 0:
            body.append(
                f'<rect x="{left}" y="{y + 4}" width="{_num(max(plot_w * p50 / scale_max, 1))}" '
                f'height="{bar_h - 8}" fill="#0072B2"><title>{escape(row.label)} p50: {format_duration(p50)}'
                f"</title></rect>"
            )
    description = "; ".join(
        f"{r.label}: median {format_duration(r.p50)}, p90 {format_duration(r.p90)}, {r.count} requests"
        for r in rows
    )
    return _svg(width, height, title, description, body, "chart-spread")
