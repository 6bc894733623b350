"""``/ui/audit``: the audit log, filtered and keyset-paged in the query, and its verification.

Verifying recomputes every event's hash, too slow for each page view of a long log: it runs
when someone asks (the "Verify now" link) and the outcome is kept per workspace, with the
newest event it covered, so the page says what was verified and what came after.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import RedirectResponse

from aifab.core import audit_events, get_workspace, verify_audit
from aifab.web.auth import UiError, Viewer, viewer
from aifab.web.paging import Page
from aifab.web.render import page
from aifab.web.routing import UiRoute

__all__ = ["parse_since", "router"]

router = APIRouter(route_class=UiRoute, include_in_schema=False)

_UNITS = {"m": 60, "h": 3600, "d": 86400}
_verified: dict[Path, dict[str, Any]] = {}
_verify_lock = threading.Lock()


def parse_since(text: str, now: float | None = None) -> float | None:
    """``30m``, ``2h``, ``7d`` (ago) or a UTC date/time (``2026-12-01``, ``2026-12-01T10:00``).

    Raises:
        UiError: anything else (400, naming the forms accepted).
    """
    text = text.strip()
    if not text:
        return None
    found = re.fullmatch(r"(\d{1,6})\s*([mhd])", text)
    if found:
        return (now or time.time()) - int(found[1]) * _UNITS[found[2]]
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UiError(400, f"since {text!r}: use 30m, 2h, 7d or a date like 2026-12-01") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _filters(request: Request) -> dict[str, str]:
    args = request.query_params
    out = {k: (args.get(k) or "").strip() for k in ("object", "actor", "action", "since")}
    for key, value in out.items():
        if len(value) > 500:
            raise UiError(400, f"{key}: at most 500 characters")
    return out


def _id(value: str | None, what: str) -> int | None:
    if value is None or value == "":
        return None
    if not value.isdigit() or len(value) > 18:
        raise UiError(400, f"{what} {value[:40]!r}: expected an event number")
    return int(value)


def _link(filters: dict[str, str], limit: int, **where: int) -> str:
    query = {k: v for k, v in filters.items() if v}
    return "/ui/audit?" + urlencode({**query, "limit": limit, **where})


def _events(
    limit: int, filters: dict[str, str], since: float | None, before: int | None, after: int | None
) -> dict[str, Any]:
    """One keyset page: ``before``/``after`` an event id, so deep pages cost what the first does."""
    rows = audit_events(
        limit + 1,
        filters["action"] or None,
        obj=filters["object"] or None,
        actor=filters["actor"] or None,
        since=since,
        before=before,
        after=after,
    )
    more = len(rows) > limit
    shown = (rows[1:] if more else rows) if after is not None else rows[:limit]
    newer = more if after is not None else before is not None
    older = after is not None or more
    prev = next_ = None
    if newer:
        prev = _link(filters, limit, after=shown[0]["id"]) if shown else _link(filters, limit)
    if older and shown:
        next_ = _link(filters, limit, before=shown[-1]["id"])
    newest = audit_events(1)
    return {
        "events": shown,
        "prev": prev,
        "next": next_,
        "newest_id": newest[0]["id"] if newest else 0,
        "verified": _verified.get(get_workspace().root),
    }


@router.get("/ui/audit")
async def audit(request: Request, who: Viewer = Depends(viewer)) -> Response:
    """The audit log, newest first, filtered by object, actor, action and time."""
    filters = _filters(request)
    since = parse_since(filters["since"])
    before = _id(request.query_params.get("before"), "before")
    after = _id(request.query_params.get("after"), "after")
    limit = Page.of(request).limit
    data = await asyncio.to_thread(_events, limit, filters, since, before, after)
    return page(request, "audit/audit.html", filters=filters, **data)


def verify_now() -> dict[str, Any]:
    """Verify the whole chain (one at a time per process) and keep the outcome."""
    with _verify_lock:
        newest = audit_events(1)
        started = time.perf_counter()
        report = verify_audit()
        outcome = {
            "ok": report.ok,
            "events": report.events,
            "problems": report.problems[:20],
            "more_problems": max(0, len(report.problems) - 20),
            "at": time.time(),
            "upto_id": newest[0]["id"] if newest else 0,
            "seconds": time.perf_counter() - started,
        }
        _verified[get_workspace().root] = outcome
        return outcome


@router.get("/ui/audit/verify")
async def verify(request: Request, who: Viewer = Depends(viewer)) -> Response:
    """Verify the chain now, then show the log with the outcome."""
    await asyncio.to_thread(verify_now)
    return RedirectResponse("/ui/audit", status_code=303)
