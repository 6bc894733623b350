"""``GET /v1/requests``: the newest entries of the sampled request log."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Query, Request

from aifab.inference.request_log import recent_requests
from aifab.serve.auth import Principal, require

router = APIRouter(tags=["requests"])


@router.get("/v1/requests")
async def list_requests(
    request: Request,
    deployment: str | None = Query(None, description="Only this deployment's requests."),
    limit: int = Query(100, ge=1, le=10_000, description="How many (newest first)."),
    _: Principal = Depends(require("read")),
) -> list[dict[str, Any]]:
    """Logged requests, newest first (this server's queued entries are written first)."""
    logger = getattr(request.app.state, "request_log", None)
    if logger is not None:
        await asyncio.to_thread(logger.flush, 5.0)
    return await asyncio.to_thread(recent_requests, deployment, limit)
