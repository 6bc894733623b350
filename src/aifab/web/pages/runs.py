"""``/ui/runs``: experiment runs, paged in the store; a run's metric curves; runs compared.

The data engineer's lineage graph links runs here (``/ui/runs/<run_id>``); dataset inputs
link back to ``/ui/data/<name>/<version>``.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request, Response

from aifab.core.errors import InvalidInputError
from aifab.track import compare_runs, get_run, list_runs, metric_history
from aifab.web import charts
from aifab.web.auth import Viewer, viewer
from aifab.web.paging import Page
from aifab.web.render import page
from aifab.web.routing import UiRoute

__all__ = ["MAX_COMPARED", "MAX_POINTS", "data_href", "router"]

router = APIRouter(route_class=UiRoute, include_in_schema=False)

#: A curve is drawn from at most this many points (every n-th of a longer history).
MAX_POINTS = 500
#: A run page draws at most this many metric charts (system metrics come last).
MAX_CHARTS = 24
#: Runs compared on one chart at most.
MAX_COMPARED = 10


def data_href(ref: str | None) -> str | None:
    """The data section's page of a dataset version ``NAME@VERSION`` (or of the dataset).

    ``/ui/data/<name>/versions/<version>``, as the data section serves it.
    """
    if not ref:
        return None
    name, _, version = ref.partition("@")
    page = f"/ui/data/{quote(name, safe='')}"
    return f"{page}/versions/{version}" if version.isdigit() else page


def _thin(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At most :data:`MAX_POINTS` points, evenly picked, always keeping the last one."""
    if len(points) <= MAX_POINTS:
        return points
    stride = -(-len(points) // MAX_POINTS)
    kept = points[::stride]
    return kept if kept[-1] is points[-1] else [*kept, points[-1]]


def _ordered_metrics(keys: list[str]) -> list[str]:
    """Model metrics first, then system metrics (``system/...``), each sorted."""
    return sorted(keys, key=lambda k: (k.startswith("system/"), k))


def _headline(key: str) -> tuple[int, str]:
    """Which metrics a runs table shows first: accuracies, then losses, then the rest."""
    rank = next((i for i, word in enumerate(("accuracy", "loss")) if word in key), 2)
    return rank, key


def _curve(key: str, points: list[dict[str, Any]]) -> dict[str, Any]:
    shown = _thin(points)
    return charts.line(
        [str(p["step"]) for p in shown], {key: [p["value"] for p in shown]}, x_label="step"
    )


def _runs_page(experiment: str | None, pg: Page) -> dict[str, Any]:
    rows = list_runs(experiment, limit=pg.limit + 1, offset=pg.offset)
    shown = rows[: pg.limit]
    keys = _ordered_metrics(sorted({k for r in shown for k in r["metrics"]}))
    return {
        "runs": shown,
        "metric_keys": sorted((k for k in keys if not k.startswith("system/")), key=_headline)[:4],
        "prev": pg.link(pg.offset - pg.limit) if pg.offset > 0 else None,
        "next": pg.link(pg.offset + pg.limit) if len(rows) > pg.limit else None,
    }


@router.get("/ui/runs")
async def runs(
    request: Request, experiment: str | None = None, who: Viewer = Depends(viewer)
) -> Response:
    """Runs, newest first, a page at a time; tick some to compare them."""
    experiment = (experiment or "").strip() or None
    data = await asyncio.to_thread(_runs_page, experiment, Page.of(request))
    return page(request, "runs/list.html", experiment=experiment, **data)


def _compare(run_ids: list[str], metric: str | None) -> dict[str, Any]:
    ids = list(dict.fromkeys(i.strip() for i in run_ids if i.strip()))
    if len(ids) > MAX_COMPARED:
        raise InvalidInputError(f"compare: at most {MAX_COMPARED} runs, got {len(ids)}")
    table = compare_runs(ids)
    keys = _ordered_metrics(list(table["metrics"]))
    if metric is None or metric not in table["metrics"]:
        metric = keys[0] if keys else None
    chart = None
    if metric is not None:
        histories = {r["id"]: _thin(metric_history(r["id"], metric)) for r in table["runs"]}
        steps = sorted({p["step"] for pts in histories.values() for p in pts})
        series = {}
        for r in table["runs"]:
            by_step = {p["step"]: p["value"] for p in histories[r["id"]]}
            series[f"{r['name']} ({r['id'][:8]})"] = [by_step.get(s) for s in steps]
        chart = charts.line([str(s) for s in steps], series, y_label=metric, x_label="step")
        for dataset in chart["data"]["datasets"]:
            dataset["spanGaps"] = True  # runs log at different steps: join each run's points
    return {"table": table, "metric": metric, "metric_keys": keys, "spec": chart}


@router.get("/ui/runs/compare")
async def compare(
    request: Request, metric: str | None = None, who: Viewer = Depends(viewer)
) -> Response:
    """Several runs (``?run=A&run=B``) side by side, one metric of all of them on one chart."""
    ids = request.query_params.getlist("run")
    data = await asyncio.to_thread(_compare, ids, metric)
    return page(request, "runs/compare.html", **data)


def _run(run_id: str) -> dict[str, Any]:
    run = get_run(run_id)
    keys = _ordered_metrics(list(run["metrics"]))
    curves: list[dict[str, Any]] = []
    singles: list[tuple[str, float]] = []
    for key in keys[:MAX_CHARTS]:
        points = metric_history(run_id, key)
        if len(points) < 2:  # a final figure (test accuracy): a number, not a chart of one dot
            singles.append((key, run["metrics"][key]))
            continue
        curves.append(
            {
                "id": f"metric-{len(curves)}",
                "key": key,
                "points": len(points),
                "spec": _curve(key, points),
            }
        )
    for ds in run["datasets"]:
        ds["href"] = data_href(ds.get("ref"))
    user_tags = {k: v for k, v in run["tags"].items() if not k.startswith("mlflow.")}
    return {
        "run": run,
        "curves": curves,
        "singles": singles,
        "more_metrics": keys[MAX_CHARTS:],
        "tags": user_tags,
    }


@router.get("/ui/runs/{run_id}")
async def run_page(request: Request, run_id: str, who: Viewer = Depends(viewer)) -> Response:
    """One run: a chart per metric's history, params, tags, dataset inputs, artifacts."""
    data = await asyncio.to_thread(_run, run_id)
    return page(request, "runs/run.html", **data)
