"""Signing in and out: ``/ui/login`` takes an API key and opens a session cookie.

The key travels once, in a POSTed form (never in a URL); the cookie then names only the key's
id and the session's id, and is HttpOnly and SameSite=Strict. The session is recorded on the
server (:mod:`aifab.serve.sessions`) and signing out ends it there, so a replayed cookie is
refused. Client keys are refused: they call models, they do not read the platform. Failed
sign-ins count against the address's failed-authentication limit (shared with the API,
:mod:`aifab.serve.auth_failures`): over it, the form answers 429.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse

from aifab.serve.auth import auth_failed, auth_wait
from aifab.serve.keys import PERMISSIONS, authenticate
from aifab.serve.limits import retry_after
from aifab.serve.sessions import end_session, open_session
from aifab.web.auth import Viewer, read_form, viewer
from aifab.web.render import page
from aifab.web.routing import UiRoute
from aifab.web.session import COOKIE, MAX_AGE_S, new_session

__all__ = ["router", "safe_next"]

router = APIRouter(route_class=UiRoute, include_in_schema=False)


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a dashboard path only (no open redirect)."""
    if not target or not target.startswith("/ui") or target.startswith("//"):
        return "/ui"
    if any(c in target for c in ("\\", "\r", "\n")) or "//" in target:
        return "/ui"
    return target


@router.get("/ui/login")
def login_form(request: Request, next: str | None = None) -> Response:
    """The sign-in form."""
    return page(request, "login.html", next=safe_next(next), error=None, viewer=None)


@router.post("/ui/login")
async def login(request: Request) -> Response:
    """Check the key and open a session; a bad key re-renders the form with the reason."""
    fields = await read_form(request, None)
    target = safe_next(fields.get("next"))
    secret = fields.get("key", "").strip()
    wait = auth_wait(request, secret)
    if wait is not None:
        after = retry_after(wait)
        slow = f"Too many failed sign-ins from this address: try again in {after} s."
        refused = page(request, "login.html", status=429, next=target, error=slow, viewer=None)
        refused.headers["Retry-After"] = after
        return refused
    key = await asyncio.to_thread(authenticate, secret)
    error: str | None = None
    if key is None:
        auth_failed(request)
        error = "That key is unknown or revoked."
    elif "read" not in PERMISSIONS.get(key.role, frozenset()):
        error = f"A {key.role} key cannot open the dashboard: use a viewer, developer or admin key."
    if error is not None or key is None:
        return page(request, "login.html", status=401, next=target, error=error, viewer=None)
    value, opened = new_session(key.id)
    await asyncio.to_thread(open_session, opened.nonce, key.id, opened.expires)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE,
        value,
        max_age=MAX_AGE_S,
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/ui/logout")
async def logout(request: Request) -> Response:
    """End the session on the server and clear the cookie (the key itself stays valid)."""
    who: Viewer = await viewer(request)
    await read_form(request, who)
    await asyncio.to_thread(end_session, who.session.nonce)
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(COOKIE, path="/ui")
    return response
