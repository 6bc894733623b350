"""``/ui/monitoring``: monitors, their results and drift per feature over time.

For a chosen run and feature: the reference distribution beside the live one.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from aifab import ops
from aifab.core.errors import AifabError, NotFoundError
from aifab.web import charts
from aifab.web.auth import Viewer, viewer
from aifab.web.render import page
from aifab.web.routing import UiRoute

__all__ = ["router"]

router = APIRouter(route_class=UiRoute, include_in_schema=False)

#: Results drawn over time on a monitor's page.
HISTORY = 50
#: Result values charted over time, when present.
TRENDS = ("requests", "error_rate", "latency_p99_ms", "drift_share", "accuracy")


def _overview() -> list[dict[str, Any]]:
    out = []
    for m in ops.list_monitors():
        last = ops.monitor_history(m["name"], limit=1)
        out.append({**m, "last": last[0] if last else None})
    return out


@router.get("/ui/monitoring")
async def monitors(request: Request, who: Viewer = Depends(viewer)) -> Response:
    """Every monitor with its latest result."""
    rows = await asyncio.to_thread(_overview)
    return page(request, "monitoring/list.html", monitors=rows)


def drift_series(results: list[dict[str, Any]]) -> dict[str, dict[str, list[float | None]]]:
    """Per drift test, per feature: its score in each result (oldest first; None: not tested)."""
    by_test: dict[str, dict[str, list[float | None]]] = defaultdict(dict)
    for i, r in enumerate(results):
        columns = ((r.get("report") or {}).get("drift") or {}).get("columns") or {}
        for feature, col in columns.items():
            for test, outcome in (col.get("tests") or {}).items():
                series = by_test[test].setdefault(feature, [None] * len(results))
                series[i] = outcome.get("value")
    return dict(by_test)


def _trends(results: list[dict[str, Any]], labels: list[str]) -> list[dict[str, Any]]:
    out = []
    for key in TRENDS:
        values = [r["values"].get(key) for r in results]
        if any(v is not None for v in values):
            out.append({"key": key, "spec": charts.line(labels, {key: values}, y_label=key)})
    return out


def _distribution(name: str, result: int, feature: str) -> dict[str, Any]:
    """The two distributions, or why they cannot be shown (a reference deleted since...)."""
    try:
        d = ops.drift_distribution(name, result, feature)
    except AifabError as exc:
        return {"error": exc.message}
    series = {"reference": d["reference"], "live": d["live"]}
    if d["kind"] == "numerical" and d.get("dates") and d["edges"]:
        days = [time.strftime("%Y-%m-%d", time.gmtime(e * 86400)) for e in d["edges"]]
        labels = [f"{lo}–{hi}" for lo, hi in zip(days[:-1], days[1:], strict=True)]
        d["spec"] = charts.bars(labels, series, y_label="share", x_label=feature)
    elif d["kind"] == "numerical" and d["edges"]:
        d["spec"] = charts.histogram(d["edges"], series, x_label=feature)
    elif d["kind"] != "numerical":
        d["spec"] = charts.bars(d["labels"], series, y_label="share", x_label=feature)
    return d


def _monitor(name: str, result: int | None, feature: str | None) -> dict[str, Any]:
    monitor = ops.get_monitor(name)
    results = list(reversed(ops.monitor_history(name, limit=HISTORY, reports=True)))
    labels = charts.time_labels([r["ts"] for r in results], with_date=True)
    drift = drift_series(results)
    with_drift = [r for r in results if ((r.get("report") or {}).get("drift") or {}).get("columns")]
    chosen = next((r for r in with_drift if r["id"] == result), None)
    if result is not None and chosen is None:
        raise NotFoundError(
            f"monitor {name!r} has no result {result} with drift among its last {HISTORY}"
        )
    if chosen is None and with_drift:
        chosen = with_drift[-1]
    features = list(chosen["report"]["drift"]["columns"]) if chosen else []
    if chosen and feature not in features:
        drifted = chosen["report"]["drift"].get("drifted") or []
        feature = drifted[0] if drifted else features[0]
    return {
        "monitor": monitor,
        "results": list(reversed(results)),
        "trends": _trends(results, labels),
        "drift_charts": [
            {"test": t, "spec": charts.line(labels, s, y_label=f"{t} score")}
            for t, s in sorted(drift.items())
        ],
        "with_drift": list(reversed(with_drift)),
        "chosen": chosen,
        "feature": feature,
        "features": features,
        "distribution": _distribution(name, chosen["id"], feature) if chosen and feature else None,
    }


@router.get("/ui/monitoring/{name}")
async def monitor(
    request: Request,
    name: str,
    result: int | None = None,
    feature: str | None = None,
    who: Viewer = Depends(viewer),
) -> Response:
    """One monitor: results over time, drift per feature, and reference vs live for a run."""
    data = await asyncio.to_thread(_monitor, name, result, feature)
    return page(request, "monitoring/monitor.html", **data)
