"""The dashboard's router: sign-in, static files and every installed section's pages.

``aifab.serve.app`` includes :data:`router` by module name, as it includes its own routers.
"""

from __future__ import annotations

import importlib

from fastapi import APIRouter, Response
from fastapi.responses import RedirectResponse

from aifab.web import signin, static_files
from aifab.web.auth import UiError
from aifab.web.nav import installed_sections
from aifab.web.routing import UiRoute

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
router.include_router(static_files.router)
router.include_router(signin.router)
for _section in installed_sections():
    router.include_router(importlib.import_module(_section.module).router)

# Last, so every real page matches first: a URL under /ui that is no page answers as a page (a
# person typed it), and a section's menu label (/ui/knowledge for /ui/kb) leads to the section.
_fallback = APIRouter(route_class=UiRoute, include_in_schema=False)


@_fallback.get("/ui/{rest:path}")
async def _not_a_page(rest: str) -> Response:
    if not rest:  # "/ui/", as people type it: the home page
        return RedirectResponse("/ui", status_code=308)
    first, _, tail = rest.partition("/")
    for section in installed_sections():
        if section.label.lower() == first.lower() and section.path != f"/ui/{first}":
            return RedirectResponse(section.path + (f"/{tail}" if tail else ""), status_code=307)
    raise UiError(404, f"no dashboard page at /ui/{rest}")


router.include_router(_fallback)
