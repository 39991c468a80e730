"""The report's plots, drawn as inline SVG (no charting library, no script, no network).

Every label comes from the lake (scenario, metric and tool names), so every one goes through
`_text`, which escapes it; numbers are formatted here.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence

from spanscore.evaluation.report.schema import (
    DistributionDoc,
    SummaryDoc,
    ToolDoc,
    TrendDoc,
    TrendSeriesDoc,
)

PASS = "#2e7d32"
FAIL = "#c62828"
MEAN = "#1f4e9a"
TRACK = "#e8eaed"
INK = "#202124"
MUTED = "#5f6368"
FONT = 'font-family="system-ui, sans-serif" font-size="12"'


def _text(value: object) -> str:
    return html.escape(str(value), quote=True)


def _short(label: str, width: int) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"


def _svg(width: int, height: int, title: str, body: list[str], cls: str) -> str:
    return (
        f'<svg class="plot {cls}" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" {FONT}>'
        f"<title>{_text(title)}</title>{''.join(body)}</svg>"
    )


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def pass_rates(summary: Sequence[SummaryDoc]) -> str:
    """Pass rate (bar) and mean score (diamond) per scenario and metric."""
    rows = list(summary)
    label_w, bar_w, row_h, top = 300, 360, 24, 28
    width, height = label_w + bar_w + 170, top + row_h * max(1, len(rows)) + 8
    body = [
        f'<text x="{label_w}" y="16" fill="{MUTED}">pass rate (bar) and mean score (◆), '
        "each mean on its metric's scale</text>"
    ]
    for i, r in enumerate(rows):
        y = top + i * row_h
        label = f"{r['scenario_id'] or '(all)'} / {r['metric']}"
        rate, mean, scale = r["pass_rate"], r["mean"], r["scale"]
        of = (
            ""
            if scale is None or (scale["low"], scale["high"]) == (0, 1)
            else f" of {scale['low']:.3g}-{scale['high']:.3g}"
        )
        colour = PASS if rate is not None and rate >= 1 else FAIL
        tip = (
            f"{label}: pass rate {_pct(rate)} ({r['passed']} of {r['judged']}), mean "
            f"{'n/a' if mean is None else f'{mean:.3f}{of}'}, {r['conversations']} conversations, "
            f"{r['errors']} errors"
        )
        body.append(f'<g class="bar"><title>{_text(tip)}</title>')
        body.append(
            f'<text x="{label_w - 8}" y="{y + 15}" text-anchor="end" fill="{INK}">'
            f"{_text(_short(label, 44))}</text>"
        )
        body.append(f'<rect x="{label_w}" y="{y + 4}" width="{bar_w}" height="14" fill="{TRACK}"/>')
        if rate is not None:
            body.append(
                f'<rect class="value" x="{label_w}" y="{y + 4}" width="{rate * bar_w:.1f}" '
                f'height="14" fill="{colour}"/>'
            )
        if mean is not None and scale is not None:
            x = label_w + (mean - scale["low"]) / (scale["high"] - scale["low"]) * bar_w
            body.append(
                f'<path d="M{x:.1f} {y + 5} l5 6 l-5 6 l-5 -6 z" fill="{MEAN}" '
                'stroke="white" stroke-width="1"/>'
            )
        shown = _pct(rate) + ("" if mean is None else f"  mean {mean:.2f}{of}")
        body.append(f'<text x="{label_w + bar_w + 8}" y="{y + 15}" fill="{INK}">{shown}</text>')
        body.append("</g>")
    return _svg(width, height, "Pass rate and mean score per scenario and metric", body, "rates")


def distributions(items: Sequence[DistributionDoc]) -> str:
    """A histogram of the values of each metric (small multiples)."""
    cell_w, cell_h, per_row = 200, 110, 4
    rows = max(1, (len(items) + per_row - 1) // per_row)
    width, height = cell_w * per_row, cell_h * rows
    body: list[str] = []
    for n, item in enumerate(items):
        x0, y0 = (n % per_row) * cell_w, (n // per_row) * cell_h
        hist = item["histogram"]
        counts = hist["counts"]
        top = max(counts) or 1
        plot_w, plot_h = cell_w - 30, cell_h - 46
        bar = plot_w / len(counts)
        body.append(f'<g class="hist" transform="translate({x0},{y0})">')
        body.append(
            f'<text x="10" y="14" fill="{INK}" font-weight="600">'
            f"{_text(_short(item['metric'], 28))}</text>"
        )
        for k, c in enumerate(counts):
            h = c / top * plot_h
            lo = hist["low"] + (hist["high"] - hist["low"]) * k / len(counts)
            hi = hist["low"] + (hist["high"] - hist["low"]) * (k + 1) / len(counts)
            body.append(
                f'<rect class="value" x="{10 + k * bar:.1f}" y="{22 + plot_h - h:.1f}" '
                f'width="{max(bar - 2, 1):.1f}" height="{h:.1f}" fill="{MEAN}">'
                f"<title>{_text(item['metric'])}: {c} values in [{lo:.3g}, {hi:.3g})</title>"
                "</rect>"
            )
        base = 22 + plot_h
        body.append(
            f'<line x1="10" x2="{10 + plot_w}" y1="{base}" y2="{base}" stroke="{MUTED}"/>'
            f'<text x="10" y="{base + 14}" fill="{MUTED}">{hist["low"]:.3g}</text>'
            f'<text x="{10 + plot_w}" y="{base + 14}" text-anchor="end" fill="{MUTED}">'
            f"{hist['high']:.3g}</text>"
            f'<text x="{10 + plot_w / 2:.0f}" y="{base + 14}" text-anchor="middle" '
            f'fill="{MUTED}">n={item["values"]}</text></g>'
        )
    return _svg(width, height, "Score distribution per metric", body, "dists")


def _x_every(labels: Sequence[str], spacing: float) -> int:
    """Label every k-th run so that labels (about 7 px a character) do not overlap."""
    widest = max((len(label) for label in labels), default=1) * 7 + 12
    return max(1, math.ceil(widest / spacing)) if spacing > 0 else 1


def trend(points: Sequence[TrendDoc]) -> str:
    """The share of each run's judged scores that passed, over the suite's runs, this run
    marked. (No overall mean: metrics have scales of their own; see `series`.)"""
    width, height, left, right, top, bottom = 800, 230, 48, 64, 16, 50
    plot_w, plot_h = width - left - right, height - top - bottom
    n = len(points)

    def x(i: int) -> float:
        return left + (plot_w / 2 if n == 1 else plot_w * i / (n - 1))

    def y(v: float) -> float:
        return top + plot_h * (1 - v)

    body = []
    for tick in (0, 0.25, 0.5, 0.75, 1):
        body.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
            f'stroke="{TRACK}"/><text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end" '
            f'fill="{MUTED}">{tick:.0%}</text>'
        )
    coords = [
        f"{x(i):.1f},{y(rate):.1f}"
        for i, p in enumerate(points)
        if (rate := p["pass_rate"]) is not None
    ]
    if len(coords) > 1:
        body.append(
            f'<polyline class="line" points="{" ".join(coords)}" fill="none" '
            f'stroke="{PASS}" stroke-width="2"/>'
        )
    every = _x_every([p["label"] for p in points], plot_w / max(1, n - 1))
    for i, p in enumerate(points):
        rate = p["pass_rate"]
        tip = (
            f"run {p['run_id']} ({p['status']}), {p['label']}: {_pct(rate)} of its judged "
            f"scores passed, {p['conversations']} conversations"
        )
        if rate is not None:
            r, fill = (7, FAIL if rate < 1 else PASS) if p["current"] else (4, PASS)
            cls = "point current" if p["current"] else "point"
            body.append(
                f'<circle class="{cls}" cx="{x(i):.1f}" cy="{y(rate):.1f}" r="{r}" '
                f'fill="{fill}" stroke="white" stroke-width="2"><title>{_text(tip)}</title>'
                "</circle>"
            )
        if p["current"]:
            body.append(
                f'<text x="{x(i):.1f}" y="{height - 6}" text-anchor="middle" fill="{INK}" '
                'font-weight="600">this run</text>'
            )
        if (n - 1 - i) % every == 0:  # counted from this run (the last), which is always shown
            body.append(
                f'<text class="xlabel" x="{x(i):.1f}" y="{height - bottom + 20}" '
                f'text-anchor="middle" fill="{MUTED}">{_text(p["label"])}</text>'
            )
    return _svg(width, height, "Share of judged scores passed per run of this suite", body, "trend")


def series(item: TrendSeriesDoc, points: Sequence[TrendDoc]) -> str:
    """One scenario's or metric's course over the runs, small: the pass rate (line, 0-100 %
    on the left) and a metric's mean (dashed, on its own scale, on the right)."""
    width, height, left, right, top, bottom = 330, 132, 38, 44, 26, 22
    plot_w, plot_h = width - left - right, height - top - bottom
    n = len(points)
    name = (item["scenario_id"] or "suite-wide") + (
        f" / {item['metric']}" if item["metric"] is not None else " (conversations)"
    )
    scale = item["scale"]

    def x(i: int) -> float:
        return left + (plot_w / 2 if n == 1 else plot_w * i / (n - 1))

    def y(v: float) -> float:
        return top + plot_h * (1 - v)

    def on_scale(v: float) -> float:
        assert scale is not None
        return y((v - scale["low"]) / (scale["high"] - scale["low"]))

    rates, means = item["pass_rate"], item["mean"]
    now = next((i for i, p in enumerate(points) if p["current"]), n - 1)
    failing = rates[now] is not None and (rates[now] or 0) < 1
    body = [
        f'<text x="2" y="14" fill="{FAIL if failing else INK}" font-weight="600">'
        f"{_text(_short(name, 46))}<title>{_text(name)}</title></text>"
    ]
    for tick in (0, 0.5, 1):
        body.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
            f'stroke="{TRACK}"/>'
        )
    if any(r is not None for r in rates):
        body += [
            f'<text x="{left - 4}" y="{y(1) + 4:.1f}" text-anchor="end" fill="{PASS}">100%</text>',
            f'<text x="{left - 4}" y="{y(0) + 4:.1f}" text-anchor="end" fill="{PASS}">0%</text>',
        ]
    if scale is not None and any(m is not None for m in means):
        for v, at in ((scale["high"], y(1)), (scale["low"], y(0))):
            body.append(
                f'<text class="scale" x="{left + plot_w + 4}" y="{at + 4:.1f}" fill="{MEAN}">'
                f"{v:.3g}</text>"
            )
    lines: list[tuple[list[float | None], Callable[[float], float], str, str, str]] = [
        (rates, y, PASS, "", "rate")
    ]
    if scale is not None:
        lines.append((means, on_scale, MEAN, ' stroke-dasharray="4 3"', "mean"))
    for values, place, colour, dash, cls in lines:
        coords = [(x(i), place(v)) for i, v in enumerate(values) if v is not None]
        if len(coords) > 1:
            shown = " ".join(f"{a:.1f},{b:.1f}" for a, b in coords)
            body.append(
                f'<polyline class="line {cls}" points="{shown}" fill="none" '
                f'stroke="{colour}" stroke-width="2"{dash}/>'
            )
        for i, value in enumerate(values):
            if value is None:
                continue
            v, p = value, points[i]
            what = f"pass rate {_pct(v)}" if cls == "rate" else f"mean {v:.3g}"
            if cls == "mean" and scale is not None:
                what += f" (scale {scale['low']:.3g} to {scale['high']:.3g})"
            tip = f"{name}, run {p['label']}{' (this run)' if p['current'] else ''}: {what}"
            r = 4.5 if p["current"] else 2.5
            body.append(
                f'<circle class="point {cls}{" current" if p["current"] else ""}" '
                f'cx="{x(i):.1f}" cy="{place(v):.1f}" r="{r}" fill="{colour}">'
                f"<title>{_text(tip)}</title></circle>"
            )
    ends = [0] if n == 1 else [0, n - 1]
    for i in ends:
        anchor = "middle" if n == 1 else "start" if i == 0 else "end"
        at = x(i) if n == 1 else left if i == 0 else left + plot_w
        body.append(
            f'<text class="xlabel" x="{at:.1f}" y="{height - 5}" text-anchor="{anchor}" '
            f'fill="{MUTED}">{_text(points[i]["label"])}</text>'
        )
    return _svg(width, height, f"{name} over the suite's runs", body, "series")


def tools(items: Sequence[ToolDoc]) -> str:
    """Calls, error rate and latency (p50 bar, p95 whisker) per tool."""
    label_w, col_w, row_h, top = 200, 190, 24, 30
    width = label_w + 3 * (col_w + 20)
    height = top + row_h * max(1, len(items)) + 8
    most = max((t["calls"] for t in items), default=1) or 1
    slowest = max((t["p95_ms"] or t["p50_ms"] or 0 for t in items), default=0) or 1
    heads = ("calls", "error rate", "latency p50 (bar), p95 (|)")
    body = [
        f'<text x="{label_w + k * (col_w + 20)}" y="16" fill="{MUTED}">{h}</text>'
        for k, h in enumerate(heads)
    ]
    for i, t in enumerate(items):
        y = top + i * row_h
        tip = (
            f"{t['name']}: {t['calls']} calls, {t['errors']} errors "
            f"({t['error_rate']:.1%}), p50 {t['p50_ms']} ms, p95 {t['p95_ms']} ms"
        )
        body.append(f'<g class="tool"><title>{_text(tip)}</title>')
        body.append(
            f'<text x="{label_w - 8}" y="{y + 15}" text-anchor="end" fill="{INK}">'
            f"{_text(_short(t['name'], 28))}</text>"
        )
        columns = (
            (t["calls"] / most, MEAN, str(t["calls"])),
            (t["error_rate"], FAIL, f"{t['error_rate']:.0%}"),
            ((t["p50_ms"] or 0) / slowest, MUTED, _ms(t["p50_ms"])),
        )
        for k, (share, colour, shown) in enumerate(columns):
            x0 = label_w + k * (col_w + 20)
            body.append(
                f'<rect x="{x0}" y="{y + 5}" width="{col_w - 50}" height="12" fill="{TRACK}"/>'
                f'<rect class="value" x="{x0}" y="{y + 5}" '
                f'width="{max(share * (col_w - 50), 0):.1f}" height="12" fill="{colour}"/>'
                f'<text x="{x0 + col_w - 44}" y="{y + 15}" fill="{INK}">{shown}</text>'
            )
        if t["p95_ms"] is not None:
            x95 = label_w + 2 * (col_w + 20) + t["p95_ms"] / slowest * (col_w - 50)
            body.append(
                f'<line x1="{x95:.1f}" x2="{x95:.1f}" y1="{y + 2}" y2="{y + 20}" '
                f'stroke="{INK}" stroke-width="2"/>'
            )
        body.append("</g>")
    return _svg(width, height, "Tool usage, error rate and latency per tool", body, "tools")


def _ms(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0f} ms" if value >= 10 else f"{value:.2g} ms"
