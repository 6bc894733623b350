"""Chart specs for the vendored Chart.js: pages build them here, templates embed them as JSON.

A spec is plain data (no functions), so it is embedded with ``tojson`` in a
``<script type="application/json">`` block that never runs, and ``static/app.js`` draws it.
Labels and values from users (column names, categories) are text there, never markup.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["bars", "histogram", "line", "time_labels"]

#: A colour-blind-safe palette (Okabe-Ito), one colour per series in order.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442")


def _clean(values: Sequence[float | int | None]) -> list[float | None]:
    # JSON has no NaN/inf: a gap in the line instead.
    out: list[float | None] = []
    for v in values:
        out.append(float(v) if v is not None and math.isfinite(float(v)) else None)
    return out


def _spec(
    kind: str,
    labels: Sequence[str],
    series: Mapping[str, Sequence[float | int | None]],
    *,
    y_label: str | None,
    x_label: str | None,
    stacked: bool = False,
) -> dict[str, Any]:
    datasets = []
    for i, (name, values) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        datasets.append(
            {
                "label": str(name),
                "data": _clean(values),
                "borderColor": colour,
                "backgroundColor": colour + ("55" if kind == "line" else "cc"),
                "spanGaps": False,
                "pointRadius": 0 if len(labels) > 60 else 2,
            }
        )
    scales: dict[str, Any] = {
        "x": {"title": {"display": bool(x_label), "text": x_label or ""}, "stacked": stacked},
        "y": {
            "title": {"display": bool(y_label), "text": y_label or ""},
            "beginAtZero": kind == "bar",
            "stacked": stacked,
        },
    }
    return {
        "type": kind,
        "data": {"labels": [str(x) for x in labels], "datasets": datasets},
        "options": {
            "animation": False,
            "responsive": True,
            "maintainAspectRatio": False,
            "interaction": {"mode": "index", "intersect": False},
            "scales": scales,
            "plugins": {"legend": {"display": len(datasets) > 1}},
        },
    }


def line(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float | int | None]],
    *,
    y_label: str | None = None,
    x_label: str | None = None,
) -> dict[str, Any]:
    """A line chart: one line per series over shared x ``labels``; None is a gap."""
    return _spec("line", labels, series, y_label=y_label, x_label=x_label)


def bars(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float | int | None]],
    *,
    y_label: str | None = None,
    x_label: str | None = None,
    stacked: bool = False,
) -> dict[str, Any]:
    """A bar chart: one bar group per label, one bar per series (stacked if asked)."""
    return _spec("bar", labels, series, y_label=y_label, x_label=x_label, stacked=stacked)


def histogram(
    edges: Sequence[float],
    counts: Mapping[str, Sequence[float]],
    *,
    x_label: str | None = None,
) -> dict[str, Any]:
    """A histogram over bin ``edges`` (n+1 values) with one bar series per entry of ``counts``.

    Several series (reference and live data) are drawn side by side on the same bins.
    """
    labels = [f"{_short(lo)}–{_short(hi)}" for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    spec = bars(labels, counts, y_label="share" if len(counts) > 1 else "rows", x_label=x_label)
    spec["options"]["scales"]["x"]["ticks"] = {"maxRotation": 60, "autoSkip": True}
    return spec


def time_labels(timestamps: Sequence[float], *, with_date: bool = False) -> list[str]:
    """Short UTC labels for epoch seconds (``HH:MM``, or ``MM-DD HH:MM``)."""
    fmt = "%m-%d %H:%M" if with_date else "%H:%M"
    return [time.strftime(fmt, time.gmtime(t)) for t in timestamps]


def _short(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.2e}"
    return f"{value:.4g}"


# --- jobs: timeline ---------------------------------------------------------------------------
__all__ += ["timeline"]

#: Bar colours of a timeline by state (the palette's, so they read the same in every chart).
STATE_COLOURS = {"succeeded": "#009E73", "running": "#0072B2", "failed": "#D55E00"}


def timeline(
    bars: Sequence[Mapping[str, Any]], *, now: float | None = None, x_label: str | None = None
) -> dict[str, Any]:
    """A Gantt chart: one row per ``lane`` (a worker), one floating bar per item.

    Each item has ``lane``, ``label`` (shown in the tooltip), ``start`` and ``end`` (epoch
    seconds; None while it runs: drawn up to ``now``) and ``state`` (its colour). The x axis
    counts seconds from the earliest start (no date adapter is vendored).
    """
    now = time.time() if now is None else now
    origin = min((float(b["start"]) for b in bars), default=now)
    lanes = list(dict.fromkeys(str(b["lane"]) for b in bars))
    datasets = []
    for b in bars:
        start = float(b["start"])
        end = now if b.get("end") is None else max(float(b["end"]), start)
        colour = STATE_COLOURS.get(str(b.get("state")), "#CC79A7")
        span = [round(start - origin, 3), round(end - origin, 3)]
        datasets.append(
            {
                "label": str(b["label"]),
                "data": [{"x": span, "y": str(b["lane"])}],
                "backgroundColor": colour + "cc",
                "borderColor": colour,
                "borderWidth": 1,
                "grouped": False,
                "minBarLength": 3,
            }
        )
    title = x_label or f"seconds since {time.strftime('%H:%M:%S UTC', time.gmtime(origin))}"
    return {
        "type": "bar",
        "data": {"labels": lanes, "datasets": datasets},
        "options": {
            "indexAxis": "y",
            "animation": False,
            "responsive": True,
            "maintainAspectRatio": False,
            "scales": {
                "x": {"type": "linear", "min": 0, "title": {"display": True, "text": title}},
                "y": {"type": "category"},
            },
            "plugins": {"legend": {"display": False}},
        },
    }
