"""``/healthz`` (alive), ``/readyz`` (every deployment loaded or failed) and ``/metrics``.

Who sees what on ``/metrics``: a scraper without credentials gets aggregates only (no key ids,
no deployment, monitor or rule names: they tell an outsider which keys and models exist); one
that sends ``Authorization: Bearer <AIFAB_METRICS_TOKEN>`` or an API key with ``read``
permission gets every series. Wrong credentials are a 401, so a misconfigured scraper notices.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from aifab.core.settings import get_settings
from aifab.serve.errors import ApiError
from aifab.serve.keys import PERMISSIONS, authenticate

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, Any]:
    """The process answers."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    """200 once every deployment has loaded or failed (with counts); 503 (the pending) before."""
    manager = request.app.state.manager
    ready, pending = manager.ready()
    if ready:
        return JSONResponse({"status": "ready", **manager.counts()})
    return JSONResponse({"status": "loading", "pending": pending}, status_code=503)


@router.get(
    "/metrics",
    responses={
        200: {"description": "Aggregates without credentials; every series with the token."},
        401: {"description": "Neither the scrape token nor an API key."},
        403: {"description": "An API key without 'read'."},
    },
)
async def metrics(request: Request) -> Response:
    """Prometheus text exposition: aggregates for anyone, every series for the scrape token."""
    public = not _may_read_all(request)
    return Response(request.app.state.metrics.render(public=public), media_type=CONTENT_TYPE_LATEST)


def _may_read_all(request: Request) -> bool:
    """Whether the request carries the scrape token or a key that may read; raises on bad ones.

    Raises:
        ApiError: 401 for credentials that are neither, 403 for a key without ``read``.
    """
    header = request.headers.get("authorization", "")
    scheme, _, secret = header.partition(" ")
    secret = secret.strip() if scheme.lower() == "bearer" else ""
    secret = secret or request.headers.get("x-api-key", "").strip()
    if not header and not secret:
        return False
    token = get_settings().metrics_token
    if (
        token is not None
        and secret
        and hmac.compare_digest(secret.encode(), token.get_secret_value().encode())
    ):
        return True
    key = authenticate(secret) if secret else None
    if key is not None:
        if "read" in PERMISSIONS.get(key.role, frozenset()):
            return True
        raise ApiError(
            403,
            f"/metrics in full needs 'read'; role {key.role!r} of key {key.id} lacks it",
            code="permission_denied",
        )
    raise ApiError(
        401,
        "/metrics: not the scrape token (AIFAB_METRICS_TOKEN) nor an API key with 'read'; "
        "send no credentials for the aggregate view",
        code="invalid_api_key",
        headers={"WWW-Authenticate": "Bearer"},
    )
