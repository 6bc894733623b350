"""``GET /v1/cost`` (the ledger grouped) and ``GET /v1/budgets`` (where each team stands)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query

from aifab.ops.cost.budget import budget_status
from aifab.ops.cost.ledger import cost_report
from aifab.serve.auth import Principal, require

router = APIRouter(tags=["cost"])


@router.get("/v1/cost")
async def get_cost(
    by: str = Query("team", description="team | project | model | deployment | day | source"),
    since: str | None = Query(None, description="Start: 24h, 7d, 2w or an ISO date (UTC)."),
    until: str | None = Query(None, description="End, same forms (default: now)."),
    team: str | None = Query(None, description="Only this team's spending."),
    principal: Principal = Depends(require("read")),
) -> dict[str, Any]:
    """Spending grouped by one dimension, largest first, with the newest usage rolled in."""
    return await principal.call(cost_report, by, since=since, until=until, team=team)


@router.get("/v1/budgets")
async def get_budgets(
    team: str | None = Query(None, description="Only this team."),
    principal: Principal = Depends(require("read")),
) -> list[dict[str, Any]]:
    """Each budget with what its team spent this period and its state (ok, alert, over)."""
    return await principal.call(budget_status, team)
