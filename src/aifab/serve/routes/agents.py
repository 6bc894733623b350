"""``/v1/agents``: define agents (developers), run them (clients, streamed on request), traces.

A run on the server calls its model and gateway tools back through this same gateway with the
caller's key, so the caller's role, rate limit and token quota apply to everything it does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from aifab import agents as svc
from aifab.serve.auth import Principal, require
from aifab.serve.keys import PERMISSIONS

router = APIRouter(prefix="/v1/agents", tags=["agents"])


class RunRequest(BaseModel):
    """``POST /v1/agents/{name}/runs``."""

    model_config = ConfigDict(extra="forbid")

    input: str = Field(min_length=1, max_length=100_000, description="The user's message.")
    stream: bool = Field(False, description="Send each step as a server-sent event.")


def _caller_secret(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("x-api-key")


def _context(request: Request, principal: Principal) -> svc.ToolContext:
    # The run's tools follow the caller's role (the rule MCP sessions follow too).
    return svc.ToolContext(
        gateway_url=str(request.base_url),
        api_key=_caller_secret(request),
        permissions=PERMISSIONS.get(principal.role, frozenset()),
    )


@router.get("/runs")
async def list_runs(
    agent: str | None = Query(None, description="Only this agent's runs."),
    limit: int = Query(50, ge=1, le=1000, description="How many, newest first."),
    _: Principal = Depends(require("read")),
) -> list[dict[str, Any]]:
    """Agent runs, newest first."""
    return await asyncio.to_thread(svc.list_runs, agent, limit)


@router.get("/runs/{run_id}")
async def get_trace(run_id: str, _: Principal = Depends(require("read"))) -> dict[str, Any]:
    """One run with every model call and tool call."""
    return await asyncio.to_thread(svc.get_trace, run_id)


@router.get("")
async def list_agents(_: Principal = Depends(require("read", "invoke"))) -> list[dict[str, Any]]:
    """Every agent's definition."""
    return await asyncio.to_thread(svc.list_agents)


@router.post("", status_code=201)
async def create_agent(
    body: dict[str, Any], principal: Principal = Depends(require("deploy"))
) -> dict[str, Any]:
    """Create an agent or replace its definition (the same fields as the YAML)."""
    return await principal.call(svc.create_agent, body)


@router.get("/{name}")
async def get_agent(name: str, _: Principal = Depends(require("read", "invoke"))) -> dict[str, Any]:
    """One agent's definition."""
    return await asyncio.to_thread(svc.get_agent, name)


@router.delete("/{name}")
async def delete_agent(
    name: str, principal: Principal = Depends(require("deploy"))
) -> JSONResponse:
    """Delete an agent (its runs stay)."""
    await principal.call(svc.delete_agent, name)
    return JSONResponse({"deleted": name})


@router.post("/{name}/runs", response_model=None)
async def run_agent(
    name: str,
    body: RunRequest,
    request: Request,
    principal: Principal = Depends(require("invoke")),
) -> dict[str, Any] | StreamingResponse:
    """Run an agent; with ``stream: true`` each step is an SSE event, then the run."""
    await asyncio.to_thread(svc.get_agent, name)  # a 404 before any stream starts
    ctx = _context(request, principal)
    if not body.stream:
        return await principal.call(svc.run_agent, name, body.input, ctx=ctx)
    return StreamingResponse(
        _stream(principal, name, body.input, ctx), media_type="text/event-stream"
    )


async def _stream(
    principal: Principal, name: str, message: str, ctx: svc.ToolContext
) -> AsyncIterator[str]:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def on_step(step: dict[str, Any]) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, ("step", step))

    async def run() -> None:
        try:
            result = await principal.call(svc.run_agent, name, message, ctx=ctx, on_step=on_step)
            await queue.put(("run", result))
        except Exception as exc:  # noqa: BLE001 - the stream reports it instead of dying mid-way
            await queue.put(("error", {"error": {"message": str(exc)}}))

    task = asyncio.create_task(run())
    try:
        while True:
            event, data = await queue.get()
            yield f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n"
            if event != "step":
                break
        yield "data: [DONE]\n\n"
    finally:
        await task
