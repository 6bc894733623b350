"""``/v1/monitors``, ``/v1/feedback`` and ``/v1/alerts``: thin callers of ``aifab.ops``."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from aifab import ops
from aifab.serve.auth import Principal, require

router = APIRouter(tags=["monitors"])


class MonitorCreate(BaseModel):
    """A new monitor."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., max_length=100, description="Monitor name.")
    spec: dict[str, Any] = Field(..., description="The MonitorSpec (deployment, drift, ...).")


class Feedback(BaseModel):
    """True labels for a served request."""

    model_config = ConfigDict(extra="forbid")

    request_id: str = Field(..., max_length=64, description="The predict response's request_id.")
    labels: list[str | int | float | bool] | None = Field(
        None, max_length=10_000, description="One label per predicted row, in order."
    )
    label: str | int | float | bool | None = Field(None, description="The label of a 1-row call.")


async def _flush(request: Request) -> None:
    logger = getattr(request.app.state, "request_log", None)
    if logger is not None:
        await asyncio.to_thread(logger.flush, 5.0)


@router.get("/v1/monitors")
async def list_monitors(_: Principal = Depends(require("read"))) -> list[dict[str, Any]]:
    """Every monitor."""
    return await asyncio.to_thread(ops.list_monitors)


@router.post("/v1/monitors", status_code=201)
async def create_monitor(
    body: MonitorCreate, principal: Principal = Depends(require("deploy"))
) -> dict[str, Any]:
    """Create a monitor."""
    return await principal.call(ops.create_monitor, body.name, body.spec)


@router.get("/v1/monitors/{name}")
async def show_monitor(name: str, _: Principal = Depends(require("read"))) -> dict[str, Any]:
    """A monitor and its latest result."""
    return await asyncio.to_thread(ops.get_monitor, name)


@router.get("/v1/monitors/{name}/history")
async def monitor_history(
    name: str,
    limit: int = Query(50, ge=1, le=1000, description="How many results (newest first)."),
    _: Principal = Depends(require("read")),
) -> list[dict[str, Any]]:
    """A monitor's results, newest first."""
    return await asyncio.to_thread(ops.monitor_history, name, limit)


@router.post("/v1/monitors/{name}/run")
async def run_monitor(
    name: str, request: Request, principal: Principal = Depends(require("deploy"))
) -> dict[str, Any]:
    """Run a monitor now over its window (this server's queued requests are written first)."""
    await _flush(request)
    return await principal.call(ops.run_monitor, name)


@router.delete("/v1/monitors/{name}")
async def delete_monitor(
    name: str, principal: Principal = Depends(require("deploy"))
) -> dict[str, Any]:
    """Delete a monitor (its results and alerts stay)."""
    await principal.call(ops.delete_monitor, name)
    return {"deleted": name}


@router.post("/v1/feedback")
async def feedback(
    request: Request, body: Feedback, principal: Principal = Depends(require("invoke"))
) -> dict[str, Any]:
    """Labels for a served request: ``{"request_id": ..., "labels": [...]}`` (or ``label``)."""
    from aifab.serve.errors import ApiError

    labels = (
        body.labels if body.labels is not None else [body.label] if body.label is not None else []
    )
    if not labels:
        raise ApiError(422, "give labels (a list) or label", param="labels")
    # This process's request log writes in batches off the hot path: write what it holds first,
    # so feedback sent right after its prediction matches it (it answered matched: false).
    await _flush(request)
    return await principal.call(ops.record_feedback, body.request_id, labels)


@router.get("/v1/alerts")
async def list_alerts(
    state: str | None = Query(None, description="firing | resolved"),
    _: Principal = Depends(require("read")),
) -> list[dict[str, Any]]:
    """Alerts, newest first."""
    return await asyncio.to_thread(ops.list_alerts, state)
