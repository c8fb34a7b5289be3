"""``sbemu report --html``: one self-contained HTML page of charts over the reporting tables.

Reads the tables of an OUT directory (sbemu.reports.tables, pyarrow; no Spark) and writes
``OUT/report.html``: inline CSS and inline SVG drawn here, no script, no CDN, no external
file, so it opens offline and can be mailed or archived as is. Charts:

- traffic over time per entity (events per UTC minute, summed over partitions);
- latency percentiles (p50/p95/p99 and max, enqueue to complete) per entity and partition;
- dead-letter reasons per entity;
- a partition skew heatmap per partitioned entity (messages sent per partition).

`latest_report(dir)` finds the newest report under a reports directory (for the dashboard).
"""

from __future__ import annotations

import html
import os
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sbemu.atomicfile import atomic_write
from sbemu.reports.tables import read_rows, summary_rows

__all__ = ["REPORT_NAME", "latest_report", "render", "write_html"]

REPORT_NAME = "report.html"
SERIES = (  # traffic columns drawn, with their colours
    ("enqueued", "#1f77b4"),
    ("completed", "#2ca02c"),
    ("abandoned", "#ff7f0e"),
    ("deadlettered", "#d62728"),
    ("expired", "#9467bd"),
)
PCTS = (("p50_ms", "#9ecae1"), ("p95_ms", "#3182bd"), ("p99_ms", "#08519c"))


def latest_report(reports_dir: str | os.PathLike[str]) -> str | None:
    """The newest report.html in a reports directory or its immediate subdirectories."""
    root = os.fspath(reports_dir)
    candidates = [os.path.join(root, REPORT_NAME)]
    try:
        candidates += [os.path.join(e.path, REPORT_NAME) for e in os.scandir(root) if e.is_dir()]
    except OSError:
        return None
    found = [(os.path.getmtime(p), p) for p in candidates if os.path.isfile(p)]
    return max(found)[1] if found else None


def write_html(out: str, *, now: datetime | None = None) -> str:
    """Render the tables of OUT into OUT/report.html (atomically); returns its path."""
    path = os.path.join(out, REPORT_NAME)
    atomic_write(path, [render(out, now=now).encode("utf-8")])
    return path


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:,.0f}k"
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:.2f}"


def _line_chart(title: str, minutes: Sequence[datetime], series: dict[str, list[int]]) -> str:
    """An SVG line chart: one polyline per series over the minutes (x), counts (y)."""
    w, h, left, bottom, top, right = 720, 220, 56, 36, 12, 12
    ymax = max([1, *(max(v) for v in series.values() if v)])
    n = len(minutes)

    def x(i: int) -> float:
        return left + (w - left - right) * (i / (n - 1) if n > 1 else 0.5)

    def y(v: float) -> float:
        return top + (h - top - bottom) * (1 - v / ymax)

    parts = [
        f'<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{_e(title)}">'
    ]
    for k in range(5):  # grid and y labels
        v = ymax * k / 4
        parts.append(
            f'<line x1="{left}" x2="{w - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="grid"/>'
        )
        parts.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{_fmt(v)}</text>')
    for i in sorted({0, n - 1, *range(0, n, max(1, n // 6))}):
        if 0 <= i < n:
            parts.append(
                f'<text x="{x(i):.1f}" y="{h - bottom + 16}" text-anchor="middle">'
                f"{minutes[i].strftime('%H:%M')}</text>"
            )
    for name, colour in SERIES:
        values = series.get(name)
        if not values or not any(values):
            continue
        pts = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
        if n == 1:
            parts.append(
                f'<circle cx="{x(0):.1f}" cy="{y(values[0]):.1f}" r="4" '
                f'fill="{colour}"><title>{name}: {values[0]}</title></circle>'
            )
        else:
            parts.append(
                f'<polyline points="{pts}" fill="none" stroke="{colour}" '
                f'stroke-width="2"><title>{name}</title></polyline>'
            )
    parts.append("</svg>")
    legend = "".join(
        f'<span class="key"><i style="background:{c}"></i>{n} {sum(series.get(n, []))}</span>'
        for n, c in SERIES
        if any(series.get(n, []))
    )
    first, last = minutes[0], minutes[-1]
    span = f"{first:%Y-%m-%d %H:%M} – {last:%Y-%m-%d %H:%M} UTC"
    return (
        f"<figure><figcaption>{_e(title)} <small>{span}</small></figcaption>{''.join(parts)}"
        f'<div class="legend">{legend}</div></figure>'
    )


def _bar_rows(title: str, rows: list[tuple[str, list[tuple[str, float, str]]]], unit: str) -> str:
    """Horizontal grouped bars: per row label, one bar per (name, value, colour)."""
    bar_h, gap, label_w, w = 12, 10, 230, 720
    vmax = max([1.0, *(v for _l, bars in rows for _n, v, _c in bars)])
    height = sum(len(bars) * bar_h + gap for _l, bars in rows) + 10
    parts = [
        f'<svg viewBox="0 0 {w} {height}" width="{w}" height="{height}" role="img" '
        f'aria-label="{_e(title)}">'
    ]
    yy = 5
    for label, bars in rows:
        parts.append(
            f'<text x="{label_w - 8}" y="{yy + bar_h * len(bars) / 2 + 4:.1f}" '
            f'text-anchor="end">{_e(label)}</text>'
        )
        for name, value, colour in bars:
            bw = (w - label_w - 90) * value / vmax
            parts.append(
                f'<rect x="{label_w}" y="{yy}" width="{bw:.1f}" height="{bar_h - 2}" '
                f'fill="{colour}"><title>{_e(name)}: {_fmt(value)} {unit}</title></rect>'
            )
            parts.append(
                f'<text x="{label_w + bw + 4:.1f}" y="{yy + bar_h - 3}" class="val">'
                f"{_e(name)} {_fmt(value)}</text>"
            )
            yy += bar_h
        yy += gap
    parts.append("</svg>")
    return f"<figure><figcaption>{_e(title)}</figcaption>{''.join(parts)}</figure>"


def _heatmap(ns: str, entity: str, counts: Sequence[int]) -> str:
    """One cell per partition, darker for more messages (relative to the busiest)."""
    cell, cols = 34, 16
    top = max(counts) or 1
    rows = (len(counts) + cols - 1) // cols
    w, h = cols * cell + 2, rows * cell + 2
    parts = [
        f'<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
        f'aria-label="partition skew of {_e(entity)}">'
    ]
    for p, n in enumerate(counts):
        x, y = 1 + (p % cols) * cell, 1 + (p // cols) * cell
        shade = n / top
        fill = f"rgb({int(247 - 239 * shade)},{int(251 - 170 * shade)},{int(255 - 99 * shade)})"
        text = "#fff" if shade > 0.55 else "#222"
        parts.append(
            f'<rect x="{x}" y="{y}" width="{cell - 2}" height="{cell - 2}" '
            f'fill="{fill}"><title>partition {p}: {n} message(s)</title></rect>'
        )
        parts.append(
            f'<text x="{x + cell / 2 - 1}" y="{y + cell / 2 + 3}" text-anchor="middle" '
            f'style="fill:{text}" class="cell">{_fmt(n)}</text>'
        )
    parts.append("</svg>")
    mean = sum(counts) / len(counts)
    ratio = f"{max(counts) / mean:.2f}" if mean else "-"
    return (
        f"<figure><figcaption>{_e(ns)} / {_e(entity)} <small>{len(counts)} partitions, "
        f"{sum(counts)} messages, max/mean {ratio}</small></figcaption>{''.join(parts)}"
        "</figure>"
    )


def render(out: str, *, now: datetime | None = None) -> str:
    """The report page for the tables of OUT, as a string."""
    now = now or datetime.now(UTC)
    sections = [
        ("Traffic per minute", _traffic_section(out)),
        ("Latency, enqueue to complete (ms)", _latency_section(out)),
        ("Dead-letter reasons", _reasons_section(out)),
        ("Partition skew", _skew_section(out)),
    ]
    parts = [f"<section><h2>{_e(t)}</h2>{c}</section>" for t, c in sections]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>sbemu report</title>
<style>
body{{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:980px}}
h1{{font-size:20px}} h2{{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}}
table{{border-collapse:collapse}} td,th{{padding:3px 10px;border-bottom:1px solid #eee;
text-align:right}} td:nth-child(-n+2),th:nth-child(-n+2){{text-align:left}}
figure{{margin:12px 0}} figcaption{{font-weight:600;margin-bottom:4px}}
small{{font-weight:normal;color:#666}} svg text{{font-size:11px;fill:#444}}
svg text.cell{{font-size:10px}} svg .grid{{stroke:#eee}} svg text.val{{fill:#666}}
.legend .key{{margin-right:14px}} .legend i{{display:inline-block;width:10px;height:10px;
margin-right:4px}}
</style></head><body>
<h1>sbemu report</h1>
<p>Tables in <code>{_e(os.path.abspath(out))}</code>, rendered {now:%Y-%m-%d %H:%M:%S} UTC.</p>
{_summary_table(out)}
{"".join(parts)}
</body></html>
"""


def _traffic_section(out: str) -> str:
    """A line chart per entity: its events per UTC minute, summed over partitions."""
    per_entity: dict[tuple[str, str], dict[datetime, dict[str, int]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(int))
    )
    for r in read_rows(out, "traffic_by_minute"):
        bucket = per_entity[(r["namespace"], r["entity"])][r["minute"]]
        for name, _c in SERIES:
            bucket[name] += r[name]
    charts = []
    for key in sorted(per_entity):
        by_minute = per_entity[key]
        first, last = min(by_minute), max(by_minute)
        minutes: list[datetime] = []
        t = first
        while t <= last and len(minutes) < 24 * 60:  # gaps drawn as zero, at most a day wide
            minutes.append(t)
            t += timedelta(minutes=1)
        if len(minutes) == 24 * 60 and last not in minutes:
            minutes = sorted(by_minute)[-24 * 60 :]
        series = {n: [by_minute.get(m, {}).get(n, 0) for m in minutes] for n, _c in SERIES}
        charts.append(_line_chart(f"{key[0]} / {key[1]}", minutes, series))
    return "".join(charts) or "<p>No traffic yet.</p>"


def _latency_section(out: str) -> str:
    lat = sorted(
        read_rows(out, "latency"), key=lambda r: (r["namespace"], r["entity"], r["partition"])
    )
    rows = [
        (
            f"{r['entity']} [{r['partition']}] ({r['completed']})",
            [(n.removesuffix("_ms"), float(r[n]), c) for n, c in PCTS],
        )
        for r in lat
    ]
    if not rows:
        return "<p>No completed messages yet.</p>"
    return _bar_rows("p50 / p95 / p99 per entity [partition] (completed)", rows, "ms")


def _reasons_section(out: str) -> str:
    reasons = sorted(
        read_rows(out, "deadletter_reasons"),
        key=lambda r: (-r["count"], r["namespace"], r["entity"], r["reason"] or ""),
    )
    rows = [
        (
            f"{r['entity']}: {r['reason'] if r['reason'] is not None else '(none)'}",
            [("count", float(r["count"]), "#d62728")],
        )
        for r in reasons
    ]
    if not rows:
        return "<p>Nothing dead-lettered.</p>"
    return _bar_rows("dead-lettered messages by reason", rows, "")


def _skew_section(out: str) -> str:
    skew = sorted(read_rows(out, "partition_skew"), key=lambda r: (r["namespace"], r["entity"]))
    maps = [
        _heatmap(r["namespace"], r["entity"], r["messages_per_partition"])
        for r in skew
        if r["partitions"] > 1
    ]
    return "".join(maps) or "<p>No partitioned entity yet.</p>"


SUMMARY_COLUMNS = (
    "namespace",
    "entity",
    "sent",
    "enqueued",
    "completed",
    "deadlettered",
    "p95 ms",
    "partitions",
    "max/mean",
    "sessions",
)


def _summary_table(out: str) -> str:
    """One row per entity (sbemu.reports.tables.summary_rows)."""
    head = "".join(f"<th>{_e(c)}</th>" for c in SUMMARY_COLUMNS)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td>{_e('-' if v is None else v)}</td>"
            for v in (
                s["namespace"],
                s["entity"],
                s["sent"],
                s["enqueued"],
                s["completed"],
                s["deadlettered"],
                s["p95_ms"],
                s["partitions"],
                None if s["max_over_mean"] is None else f"{s['max_over_mean']:.2f}",
                s["sessions"],
            )
        )
        + "</tr>"
        for s in summary_rows(out)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
