"""``/ui/cost``: spending by team, project and day, and each team's budget with its share spent.

Reads the cost ledger as it stands (``refresh=False``): rolling new usage in is the collector's
job, not a page view's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from aifab import ops
from aifab.web import charts
from aifab.web.auth import UiError, Viewer, viewer
from aifab.web.render import page
from aifab.web.routing import UiRoute

__all__ = ["router"]

router = APIRouter(route_class=UiRoute, include_in_schema=False)

#: The periods offered (query value -> label); ``all`` is the whole ledger.
PERIODS = {"7d": "7 days", "30d": "30 days", "90d": "90 days", "all": "everything"}


def _report(by: str, since: str | None) -> dict[str, Any]:
    report = ops.cost_report(by, since=since, refresh=False)
    rows = report["rows"]
    if by == "day":
        rows = sorted(rows, key=lambda r: str(r["day"]))
    labels = [str(r[by]) if r[by] is not None else "(none)" for r in rows]
    report["rows"] = rows
    report["chart"] = charts.bars(
        labels, {"cost": [r["cost"] for r in rows]}, y_label=report["currency"], x_label=by
    )
    return report


def _cost(period: str) -> dict[str, Any]:
    since = None if period == "all" else period
    return {
        "reports": {by: _report(by, since) for by in ("team", "project", "day")},
        "budgets": ops.budget_status(refresh=False),
    }


@router.get("/ui/cost")
async def cost(request: Request, since: str = "30d", who: Viewer = Depends(viewer)) -> Response:
    """Spending by team, project and day over a period, and budgets."""
    if since not in PERIODS:
        raise UiError(400, f"since {since!r}: use one of {', '.join(PERIODS)}")
    data = await asyncio.to_thread(_cost, since)
    return page(request, "cost/cost.html", since=since, periods=PERIODS, **data)
