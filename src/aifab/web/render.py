"""HTML responses: the Jinja2 environment (autoescaping everything) and the security headers.

Every value a page shows may come from users (dataset values, model outputs, agent traces):
autoescaping is on for every template, and the Content-Security-Policy allows scripts only from
this server's ``/ui/static`` (no inline script runs, even if markup slipped through).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from functools import cache
from importlib.resources import files
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from aifab.web.nav import visible_nav

__all__ = ["SECURITY_HEADERS", "environment", "page", "static_url"]

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@cache
def _asset_version(name: str) -> str:
    data = files("aifab.web").joinpath("static", name).read_bytes()
    return hashlib.sha256(data).hexdigest()[:12]


def static_url(name: str) -> str:
    """The URL of a packaged static file, with its content hash (so it can be cached forever)."""
    return f"/ui/static/{name}?v={_asset_version(name)}"


def _ago(ts: float | None) -> str:
    if ts is None:
        return "—"
    delta = time.time() - float(ts)
    if delta < 0:
        return "in the future"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if delta >= size:
            return f"{int(delta // size)} {unit} ago"
    return f"{int(delta)} s ago"


def _when(ts: float | None) -> str:
    if ts is None:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(ts)))


def _num(value: Any, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 1e15:
        return f"{value:.3e}"
    # Past ``digits`` integer digits, ``g`` switches to exponents ("4.35e+03 ms"): a person
    # reads a whole number with separators more easily, and loses nothing that matters.
    return f"{value:,.0f}" if abs(value) >= 10**digits else f"{value:,.{digits}g}"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)


@cache
def environment() -> Environment:
    """The dashboard's Jinja2 environment (templates packaged in ``aifab/web/templates``)."""
    env = Environment(
        loader=PackageLoader("aifab.web", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(ago=_ago, when=_when, num=_num, pretty=_pretty)
    env.globals.update(static=static_url)
    return env


def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """Render ``template`` with ``context`` (plus the request and the viewer, if signed in)."""
    context.setdefault("viewer", getattr(request.state, "viewer", None))
    context.setdefault("nav", visible_nav(context["viewer"]))
    context.setdefault("path", request.url.path)
    html = environment().get_template(template).render(request=request, **context)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)
