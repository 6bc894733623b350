"""The dashboard's router: sign-in, static files and every installed section's pages.

``aifab.serve.app`` includes :data:`router` by module name, as it includes its own routers.
"""

from __future__ import annotations

import importlib

from fastapi import APIRouter

from aifab.web import signin, static_files
from aifab.web.nav import installed_sections

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
router.include_router(static_files.router)
router.include_router(signin.router)
for _section in installed_sections():
    router.include_router(importlib.import_module(_section.module).router)
