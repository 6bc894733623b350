"""``/ui/alerts``: alerts firing and resolved, their history, silences, and silencing.

Silencing changes what people are told, so it takes the ``deploy`` permission, as creating and
running monitors does in the API; it is audited as the viewer's key.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import RedirectResponse

from aifab import ops
from aifab.core.actor import acting_as
from aifab.web.auth import UiError, Viewer, need, read_form, viewer
from aifab.web.render import page
from aifab.web.routing import UiRoute

__all__ = ["DURATIONS", "router"]

router = APIRouter(route_class=UiRoute, include_in_schema=False)

#: The silence lengths offered (label -> seconds); a form naming another is refused.
DURATIONS = {"15 minutes": 900, "1 hour": 3600, "4 hours": 14400, "1 day": 86400, "7 days": 604800}
_MAX_TEXT = 200


def _alerts(state: str | None) -> dict[str, Any]:
    return {
        "alerts": ops.list_alerts(state, limit=100),
        "history": ops.alert_history(limit=50),
        "silences": ops.list_silences(active_only=False)[:50],
    }


@router.get("/ui/alerts")
async def alerts(
    request: Request, state: str | None = None, who: Viewer = Depends(viewer)
) -> Response:
    """Alerts (all, firing or resolved), the newest alert events, and silences."""
    if state not in (None, "", "firing", "resolved"):
        raise UiError(400, f"state {state!r}: use firing or resolved")
    data = await asyncio.to_thread(_alerts, state or None)
    context = {"state": state or "", "durations": DURATIONS, "now": time.time(), **data}
    return page(request, "alerts/alerts.html", **context)


def _silence_fields(fields: dict[str, str]) -> dict[str, Any]:
    rule = fields.get("rule", "").strip() or None
    monitor = fields.get("monitor", "").strip() or None
    for what, value in (("rule", rule), ("monitor", monitor)):
        if value is not None and len(value) > _MAX_TEXT:
            raise UiError(400, f"{what}: at most {_MAX_TEXT} characters")
    if rule is None and monitor is None:
        raise UiError(400, "a silence needs a rule, a monitor, or both")
    label = fields.get("duration", "")
    if label not in DURATIONS:
        raise UiError(400, f"duration {label!r}: choose one of {', '.join(DURATIONS)}")
    reason = fields.get("reason", "").strip()
    if len(reason) > 500:
        raise UiError(400, "reason: at most 500 characters")
    return {"rule": rule, "monitor": monitor, "duration_s": DURATIONS[label], "reason": reason}


def _silence(actor: str, args: dict[str, Any]) -> dict[str, Any]:
    with acting_as(actor):
        return ops.silence_alerts(**args)


@router.post("/ui/alerts/silence")
async def silence(request: Request, who: Viewer = Depends(viewer)) -> Response:
    """Silence alerts of a rule and/or monitor for a while (developers and admins)."""
    fields = await read_form(request, who)
    need(who, "deploy")
    args = _silence_fields(fields)
    await asyncio.to_thread(_silence, who.actor, args)
    return RedirectResponse("/ui/alerts", status_code=303)
