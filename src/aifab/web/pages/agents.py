"""``/ui/agents``: agents, their runs (paged), and one run as a step-by-step trace.

Traces hold model outputs and tool results: untrusted text, shown escaped like everything else.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from aifab import agents
from aifab.web.auth import Viewer, viewer
from aifab.web.paging import Page
from aifab.web.render import page
from aifab.web.routing import UiRoute

__all__ = ["router"]

router = APIRouter(route_class=UiRoute, include_in_schema=False)


def _runs(paging: Page, agent: str | None) -> dict[str, Any]:
    rows = agents.list_runs(agent, limit=paging.limit + 1, offset=paging.offset)
    more = len(rows) > paging.limit
    return {
        "runs": rows[: paging.limit],
        "prev": paging.link(paging.offset - paging.limit) if paging.offset > 0 else None,
        "next": paging.link(paging.offset + paging.limit) if more else None,
    }


def _overview(paging: Page) -> dict[str, Any]:
    return {"agents": agents.list_agents(), **_runs(paging, None)}


@router.get("/ui/agents")
async def agent_list(request: Request, who: Viewer = Depends(viewer)) -> Response:
    """Every agent and the newest runs of all of them."""
    data = await asyncio.to_thread(_overview, Page.of(request))
    return page(request, "agents/list.html", agent=None, **data)


def _agent(name: str, paging: Page) -> dict[str, Any]:
    return {"agent": agents.get_agent(name), **_runs(paging, name)}


@router.get("/ui/agents/{name}")
async def agent_page(request: Request, name: str, who: Viewer = Depends(viewer)) -> Response:
    """One agent: its spec and its runs."""
    data = await asyncio.to_thread(_agent, name, Page.of(request))
    return page(request, "agents/agent.html", **data)


@router.get("/ui/agents/runs/{run_id}")
async def trace(request: Request, run_id: str, who: Viewer = Depends(viewer)) -> Response:
    """One run, step by step: every model call and tool call with its input and output."""
    run = await asyncio.to_thread(agents.get_trace, run_id)
    return page(request, "agents/trace.html", run=run)
