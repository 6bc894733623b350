"""``/ui/prompts``: prompts with their versions, aliases, templates and evaluations."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from aifab import prompts
from aifab.core.errors import AifabError
from aifab.web.auth import Viewer, viewer
from aifab.web.render import page
from aifab.web.routing import UiRoute

__all__ = ["router"]

router = APIRouter(route_class=UiRoute, include_in_schema=False)


@router.get("/ui/prompts")
async def prompt_list(request: Request, who: Viewer = Depends(viewer)) -> Response:
    """Every prompt's latest version."""
    rows = await asyncio.to_thread(prompts.list_prompts)
    return page(request, "prompts/list.html", prompts=rows)


def _evals(name: str) -> dict[str, Any]:
    """Evaluations from the tracking store; a store that cannot be read is said, not raised."""
    try:
        return {"rows": prompts.list_evals(name), "error": None}
    except AifabError as exc:
        return {"rows": [], "error": exc.message}


def _prompt(name: str, version: int | None) -> dict[str, Any]:
    versions = prompts.list_prompts(name)
    shown = next((v for v in versions if v["version"] == version), None) if version else None
    if version is not None and shown is None:
        shown = prompts.get_prompt(f"{name}@{version}")  # raises NotFoundError, named
    evals = _evals(name)
    scorers = sorted({k for e in evals["rows"] for k in e["scores"]})
    return {
        "name": name,
        "versions": versions,
        "shown": shown or versions[0],
        "evals": evals["rows"],
        "evals_error": evals["error"],
        "scorers": scorers,
    }


@router.get("/ui/prompts/{name}")
async def prompt_page(
    request: Request, name: str, version: int | None = None, who: Viewer = Depends(viewer)
) -> Response:
    """One prompt: its versions with aliases, a version's template, and evaluations."""
    data = await asyncio.to_thread(_prompt, name, version)
    return page(request, "prompts/prompt.html", **data)
