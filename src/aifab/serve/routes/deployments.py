"""``/v1/deployments``: list, show, create, update, delete, promote and roll back deployments.

Thin callers of :mod:`aifab.inference.deployments` (which validates and audits), run on a
thread as the calling key; the manager is poked so the change is served at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from aifab.inference import deployments as svc
from aifab.serve.auth import Principal, require

router = APIRouter(prefix="/v1/deployments", tags=["deployments"])


class DeploymentCreate(BaseModel):
    """A new deployment (see ``aifab deploy``)."""

    model_config = ConfigDict(extra="forbid")

    # Lengths are the table's column sizes.
    model: str = Field(..., min_length=1, max_length=200, description="NAME@ALIAS|VERSION")
    name: str | None = Field(
        None, max_length=100, description="Deployment name (default: the model name)."
    )
    replicas: int = Field(1, description="Worker threads running the model (1-16).")
    max_batch_size: int = Field(1, description="Dynamic batching: items per model call.")
    max_wait_ms: float = Field(0.0, description="Dynamic batching: wait for more requests.")
    backend: str = Field("torch", description="torch | onnx")
    canary: str | None = Field(
        None, max_length=200, description="A second version taking some traffic."
    )
    canary_weight: float = Field(0.0, description="Percent of requests to the canary (0-100).")
    sticky_header: str | None = Field(
        None, max_length=100, description="Route by this header's value."
    )
    options: dict[str, Any] | None = Field(None, description="Handler options.")


class DeploymentUpdate(BaseModel):
    """Changes to a deployment; fields left out stay as they are (``canary: null`` drops it)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(None, min_length=1, max_length=200)
    replicas: int | None = None
    max_batch_size: int | None = None
    max_wait_ms: float | None = None
    backend: str | None = None
    canary: str | None = Field(None, max_length=200)
    canary_weight: float | None = None
    sticky_header: str | None = Field(None, max_length=100)
    options: dict[str, Any] | None = None


async def _call(
    request: Request, principal: Principal, fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    result = await principal.call(fn, *args, **kwargs)
    request.app.state.manager.poke()
    return result


def _view(request: Request, row: dict[str, Any]) -> dict[str, Any]:
    """The stored deployment plus what this server makes of it right now."""
    live = request.app.state.manager.status(row["name"])
    return {**row, "server": live}


@router.get("")
async def list_deployments(
    request: Request, _: Principal = Depends(require("read"))
) -> list[dict[str, Any]]:
    """Every deployment with its status."""
    rows = await asyncio.to_thread(svc.list_deployments)
    return [_view(request, r) for r in rows]


@router.get("/{name}")
async def get_deployment(
    name: str, request: Request, _: Principal = Depends(require("read"))
) -> dict[str, Any]:
    """One deployment: settings, status (``failed`` with its reason), what is served."""
    return _view(request, await asyncio.to_thread(svc.get_deployment, name))


@router.post("", status_code=201)
async def create_deployment(
    body: DeploymentCreate, request: Request, principal: Principal = Depends(require("deploy"))
) -> dict[str, Any]:
    """Deploy a registered model; it loads in the background (watch ``status``)."""
    fields = body.model_dump()
    model = fields.pop("model")
    if fields["options"] is None:
        fields.pop("options")
    row = await _call(request, principal, svc.create_deployment, model, **fields)
    return _view(request, row)


@router.patch("/{name}")
async def update_deployment(
    name: str,
    body: DeploymentUpdate,
    request: Request,
    principal: Principal = Depends(require("deploy")),
) -> dict[str, Any]:
    """Change settings, the model or the canary; the server reloads what changed."""
    changes = body.model_dump(exclude_unset=True)
    row = await _call(request, principal, svc.update_deployment, name, **changes)
    return _view(request, row)


@router.delete("/{name}")
async def delete_deployment(
    name: str, request: Request, principal: Principal = Depends(require("deploy"))
) -> JSONResponse:
    """Stop serving and forget the deployment."""
    await _call(request, principal, svc.delete_deployment, name)
    return JSONResponse({"deleted": name})


@router.post("/{name}/promote")
async def promote(
    name: str,
    request: Request,
    force: bool = Query(False, description="Promote a canary whose test accuracy is lower."),
    principal: Principal = Depends(require("deploy")),
) -> dict[str, Any]:
    """Make the canary the primary (moving the alias when the primary is an alias)."""
    return _view(request, await _call(request, principal, svc.promote_canary, name, force=force))


@router.post("/{name}/rollback")
async def rollback(
    name: str, request: Request, principal: Principal = Depends(require("deploy"))
) -> dict[str, Any]:
    """Drop the canary: all traffic back to the primary."""
    return _view(request, await _call(request, principal, svc.rollback_canary, name))
