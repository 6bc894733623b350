"""``/ui/deployments``: traffic split, latency, throughput, errors and batch sizes over time.

Developers get canary controls; roles that may invoke models get a try-it form that predicts
with the viewer's own key.

Changes run the :mod:`aifab.inference.deployments` service calls as the viewer's key (audited
as in the API). Try-it goes through :func:`aifab.serve.routes.predict.predict_body`, the body of
``POST /v1/predict/<name>``, after :func:`aifab.serve.auth.admit` let the session's key make the
request: the same role check, rate limit, quota, request log entry and metrics as an API call,
without the browser ever holding the key's secret.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import RedirectResponse

from aifab.core.actor import acting_as
from aifab.core.errors import InvalidInputError
from aifab.inference.deployments import (
    get_deployment,
    list_deployments,
    promote_canary,
    rollback_canary,
    update_deployment,
)
from aifab.inference.request_log import recent_requests
from aifab.inference.traffic import traffic_summary, traffic_window
from aifab.serve.auth import admit
from aifab.serve.errors import ApiError
from aifab.serve.routes.predict import predict_body
from aifab.web import charts
from aifab.web.auth import Viewer, need, read_form, viewer
from aifab.web.render import page
from aifab.web.routing import UiRoute

__all__ = ["WINDOWS", "router"]

router = APIRouter(route_class=UiRoute, include_in_schema=False)

#: The traffic windows a page offers: name -> (window seconds, bucket seconds).
WINDOWS = {
    "15m": (900.0, 15.0),
    "1h": (3600.0, 60.0),
    "6h": (21600.0, 300.0),
    "24h": (86400.0, 1200.0),
}
_LIST_WINDOW_S = 3600.0


def _rows() -> list[dict[str, Any]]:
    traffic = traffic_summary(_LIST_WINDOW_S)
    return [{**d, "traffic": traffic.get(d["name"])} for d in list_deployments()]


@router.get("/ui/deployments")
async def deployments(request: Request, who: Viewer = Depends(viewer)) -> Response:
    """Every deployment with its split and the last hour's traffic."""
    rows = await asyncio.to_thread(_rows)
    return page(request, "deployments/list.html", deployments=rows, window_s=_LIST_WINDOW_S)


def _charts(series: dict[str, list[Any]], bucket_s: float, with_date: bool) -> dict[str, Any]:
    labels = charts.time_labels(series["ts"], with_date=with_date)
    per_minute = 60.0 / bucket_s
    return {
        "latency": charts.line(
            labels, {"p50": series["p50_ms"], "p99": series["p99_ms"]}, y_label="ms"
        ),
        "throughput": charts.bars(
            labels,
            {"requests/min": [n * per_minute for n in series["requests"]]},
            y_label="requests per minute",
        ),
        "errors": charts.bars(labels, {"errors": series["errors"]}, y_label="responses ≥ 400"),
    }


def _example(name: str, columns: list[str] | None) -> str:
    """Records to start the try-it form with: the last logged ones, else the input columns."""
    for entry in recent_requests(name, limit=20):
        records = (entry.get("input") or {}).get("records")
        if isinstance(records, list) and records:
            return json.dumps(records[:2], indent=1, ensure_ascii=False)
    return json.dumps([{c: None for c in columns or []}], indent=1)


def _model_href(ref: str | None) -> str | None:
    """The models section's page of a registry ref (a version's, or the model's for an alias)."""
    if not ref or ref.startswith("builtin:") or "/" in ref:
        return None
    name, _, selector = ref.partition("@")
    return f"/ui/models/{name}/{selector}" if selector.isdigit() else f"/ui/models/{name}"


def _traffic(name: str, window: str) -> dict[str, Any]:
    """The window's charts and totals of deployment ``name`` (NotFoundError if there is none)."""
    get_deployment(name)
    window_s, bucket_s = WINDOWS[window]
    traffic = traffic_window(name, window_s=window_s, bucket_s=bucket_s)  # one read of the log
    series = traffic["series"]
    return {
        "charts": _charts(series, bucket_s, with_date=window_s > 86_000),
        "totals": {"requests": sum(series["requests"]), "errors": sum(series["errors"])},
        "by_model": traffic["by_model"],
    }


def _detail(name: str, window: str, columns: list[str] | None) -> dict[str, Any]:
    d = get_deployment(name)
    weight = float(d["canary_weight"] or 0.0) if d["canary"] else 0.0
    return {
        "d": d,
        "split": {"primary": 100.0 - weight, "canary": weight},
        "links": {"model": _model_href(d["model"]), "canary": _model_href(d["canary"])},
        "example": _example(name, columns),
        **_traffic(name, window),
    }


def _live(request: Request, name: str) -> dict[str, Any]:
    """What this server makes of the deployment now: status, batch sizes, input columns."""
    state = request.app.state
    manager = getattr(state, "manager", None)
    metrics = getattr(state, "metrics", None)
    columns = None
    if manager is not None:
        try:
            columns = list(getattr(manager.get(name).primary.handler, "input_columns", None) or [])
        except ApiError:
            columns = None
    batches = metrics.batch_sizes(name) if metrics is not None else []
    return {
        "server": manager.status(name) if manager is not None else None,
        "columns": columns,
        "batches": charts.bars(
            [b for b, _ in batches], {"model calls": [n for _, n in batches]}, x_label="batch size"
        )
        if batches
        else None,
    }


async def _render(
    request: Request, name: str, window: str, result: dict[str, Any] | None = None, **extra: Any
) -> Response:
    if window not in WINDOWS:
        window = "1h"
    live = _live(request, name)
    data = await asyncio.to_thread(_detail, name, window, live["columns"])
    status = result["status"] if result and result["status"] >= 400 else 200
    return page(
        request,
        "deployments/deployment.html",
        status=status,
        window=window,
        windows=list(WINDOWS),
        live=live,
        result=result,
        **data,
        **extra,
    )


@router.get("/ui/deployments/{name}")
async def deployment(
    request: Request, name: str, window: str = "1h", who: Viewer = Depends(viewer)
) -> Response:
    """One deployment: split, latency p50/p99, throughput, errors, batch sizes; its controls."""
    return await _render(request, name, window)


@router.get("/ui/deployments/{name}/traffic")
async def traffic(
    request: Request, name: str, window: str = "1h", who: Viewer = Depends(viewer)
) -> Response:
    """The traffic charts alone (the deployment page's htmx refreshes them)."""
    window = window if window in WINDOWS else "1h"
    live = _live(request, name)
    data = await asyncio.to_thread(_traffic, name, window)
    return page(
        request, "deployments/traffic.html", d={"name": name}, window=window, live=live, **data
    )


async def _change(request: Request, who: Viewer, name: str, fn: Any, **kwargs: Any) -> Response:
    """Run a deployment change as the viewer's key, wake the server, back to the page."""

    def run() -> None:
        with acting_as(who.actor):
            fn(name, **kwargs)

    await asyncio.to_thread(run)
    manager = getattr(request.app.state, "manager", None)
    if manager is not None:
        manager.poke()
    return RedirectResponse(f"/ui/deployments/{name}", status_code=303)


@router.post("/ui/deployments/{name}/canary")
async def set_canary(request: Request, name: str, who: Viewer = Depends(viewer)) -> Response:
    """Send a share of the traffic to a canary version (``NAME@VERSION``)."""
    fields = await read_form(request, who)
    need(who, "deploy")
    canary = fields.get("canary", "").strip()
    if not canary:
        raise InvalidInputError("canary: give the model version to send traffic to")
    try:
        weight = float(fields.get("weight", ""))
    except ValueError:
        raise InvalidInputError(f"weight {fields.get('weight')!r}: expected 0 to 100") from None
    return await _change(request, who, name, update_deployment, canary=canary, canary_weight=weight)


@router.post("/ui/deployments/{name}/promote")
async def promote(request: Request, name: str, who: Viewer = Depends(viewer)) -> Response:
    """Make the canary the primary (moving the alias when the primary is an alias)."""
    await read_form(request, who)
    need(who, "deploy")
    return await _change(request, who, name, promote_canary)


@router.post("/ui/deployments/{name}/rollback")
async def rollback(request: Request, name: str, who: Viewer = Depends(viewer)) -> Response:
    """Drop the canary: all traffic back to the primary."""
    await read_form(request, who)
    need(who, "deploy")
    return await _change(request, who, name, rollback_canary)


def _body(text: str) -> bytes:
    """The predict body for what was typed (a JSON list of records is wrapped as ``records``).

    Anything else goes as typed, so predict answers it as it would answer an API client.
    """
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return text.encode()
    return json.dumps({"records": value}).encode() if isinstance(value, list) else text.encode()


@router.post("/ui/deployments/{name}/try")
async def try_it(request: Request, name: str, who: Viewer = Depends(viewer)) -> Response:
    """Predict for the typed records with the viewer's key, exactly as ``POST /v1/predict``."""
    fields = await read_form(request, who)
    need(who, "invoke")
    text = fields.get("records", "")
    try:
        admit(request, who.key, ("invoke",))  # the key as the session read it (<= 1 s ago)
        answer = await predict_body(request, name, _body(text))
        result = {"status": 200, "body": answer}
    except ApiError as exc:
        result = {"status": exc.status, "error": exc.message}
    return await _render(request, name, "1h", result, typed=text)
