"""``GET /ui/static/...``: the dashboard's packaged CSS, JS and vendored libraries.

Served without a session (they hold nothing private) and cached for a year: pages link them
with their content hash (:func:`aifab.web.render.static_url`), so a new release is a new URL.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

__all__ = ["router"]

router = APIRouter(include_in_schema=False)

# Segments never start with a dot, so no ``..`` (and no hidden files) can be named.
_NAME = re.compile(
    r"(?:[A-Za-z0-9_-][A-Za-z0-9_.-]*/)*[A-Za-z0-9_-][A-Za-z0-9_.-]*\.(js|css|svg|txt)"
)
_TYPES = {
    "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "svg": "image/svg+xml",
    "txt": "text/plain; charset=utf-8",
}


@cache
def _read(name: str) -> bytes | None:
    target = files("aifab.web").joinpath("static", *name.split("/"))
    return target.read_bytes() if target.is_file() else None


@router.get("/ui/static/{name:path}")
def static_file(name: str) -> Response:
    """One packaged static file, or 404."""
    data = _read(name) if _NAME.fullmatch(name) else None
    if data is None:
        return JSONResponse({"error": {"message": f"no static file {name!r}"}}, status_code=404)
    return Response(
        data,
        media_type=_TYPES[name.rsplit(".", 1)[1]],
        headers={
            "Cache-Control": "public, max-age=31536000, immutable",
            "X-Content-Type-Options": "nosniff",
        },
    )
