"""``GET /ui/static/...``: the dashboard's packaged CSS, JS and vendored libraries.

Served without a session (they hold nothing private) and cached for a year: pages link them
with their content hash (:func:`aifab.web.render.static_url`), so a new release is a new URL.
The packaged names are listed once; only those are ever read or cached, so unauthenticated
misses cost a set lookup and remember nothing.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable

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


#: Longest name echoed in a 404 (a miss may be kilobytes long).
_SHOWN = 80


@cache
def _packaged() -> frozenset[str]:
    """Every servable name under ``static/`` (``vendor/x.js``), listed once."""
    found: set[str] = set()

    def walk(node: Traversable, prefix: str) -> None:
        for child in node.iterdir():
            name = prefix + child.name
            if child.is_dir():
                walk(child, name + "/")
            elif _NAME.fullmatch(name):
                found.add(name)

    walk(files("aifab.web").joinpath("static"), "")
    return frozenset(found)


@cache
def _read(name: str) -> bytes:
    """A packaged file's bytes; only called for names in :func:`_packaged` (bounded)."""
    return files("aifab.web").joinpath("static", *name.split("/")).read_bytes()


@router.get("/ui/static/{name:path}")
def static_file(name: str) -> Response:
    """One packaged static file, or 404."""
    if name not in _packaged():
        shown = name if len(name) <= _SHOWN else name[:_SHOWN] + "..."
        return JSONResponse({"error": {"message": f"no static file {shown!r}"}}, status_code=404)
    data = _read(name)
    return Response(
        data,
        media_type=_TYPES[name.rsplit(".", 1)[1]],
        headers={
            "Cache-Control": "public, max-age=31536000, immutable",
            "X-Content-Type-Options": "nosniff",
        },
    )
