"""``/ui``: the workspace at a glance: data, jobs, deployments' live traffic, alerts, spend."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from aifab.data import list_datasets
from aifab.inference.deployments import list_deployments
from aifab.inference.traffic import traffic_summary
from aifab.jobs import list_jobs
from aifab.web import charts
from aifab.web.auth import Viewer, viewer
from aifab.web.render import page
from aifab.web.routing import UiRoute

__all__ = ["router"]

router = APIRouter(route_class=UiRoute, include_in_schema=False)

#: The window of the live request figures, seconds.
LIVE_WINDOW_S = 300.0


def _deployments() -> list[dict[str, Any]]:
    traffic = traffic_summary(LIVE_WINDOW_S)
    return [{**d, "traffic": traffic.get(d["name"])} for d in list_deployments()]


def _ops() -> dict[str, Any]:
    """Alerts and spend, when the operations layer is installed."""
    if importlib.util.find_spec("aifab.ops") is None:
        return {"alerts": None, "spend": None, "budgets": []}
    from aifab.ops import budget_status, cost_report, list_alerts

    spend = cost_report(by="day", since="7d", refresh=False)
    days = [r["day"] for r in spend["rows"]]
    spend["chart"] = charts.bars(
        days, {"spend": [r["cost"] for r in spend["rows"]]}, y_label=spend["currency"]
    )
    return {
        "alerts": list_alerts("firing", limit=20),
        "spend": spend,
        "budgets": budget_status(refresh=False),
    }


def _overview() -> dict[str, Any]:
    datasets = list_datasets()
    datasets.sort(key=lambda d: d.get("updated_at") or 0, reverse=True)
    return {
        "datasets": datasets[:8],
        "dataset_count": len(datasets),
        "running": list_jobs(state="running", limit=20),
        "pending": list_jobs(state="pending", limit=20),
        "deployments": _deployments(),
        **_ops(),
    }


@router.get("/ui")
async def home(request: Request, who: Viewer = Depends(viewer)) -> Response:
    """The home page."""
    data = await asyncio.to_thread(_overview)
    return page(request, "home.html", live_window_s=LIVE_WINDOW_S, **data)


@router.get("/ui/fragments/home-deployments")
async def deployments_fragment(request: Request, who: Viewer = Depends(viewer)) -> Response:
    """The live deployments table (htmx polls it)."""
    rows = await asyncio.to_thread(_deployments)
    return page(
        request, "fragments/home_deployments.html", deployments=rows, live_window_s=LIVE_WINDOW_S
    )
