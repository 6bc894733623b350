"""``/healthz`` (alive), ``/readyz`` (every deployment loaded or failed) and ``/metrics``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, Any]:
    """The process answers."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    """200 once every deployment has loaded or failed; 503 (with the pending ones) before."""
    ready, pending = request.app.state.manager.ready()
    if ready:
        return JSONResponse({"status": "ready"})
    return JSONResponse({"status": "loading", "pending": pending}, status_code=503)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    """Prometheus text exposition (open: scrapers carry no key)."""
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
